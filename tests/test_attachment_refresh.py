"""A schedulable node's Attachment is written only when its load balancers changed: an unchanged one costs
Metacontroller no write, and the Node (its owner) no extra sync."""
from __future__ import annotations

import copy
import json
import pathlib

from hooks.detacher import targets
from tests.fixtures.writer import decide_case

CASE = pathlib.Path(__file__).parent / "fixtures" / "node-detacher" / "idle-stale-cache-refreshed.json"


def _case(same: bool, env: dict | None = None) -> tuple[dict, dict]:
    case = copy.deepcopy(json.loads(CASE.read_text()))
    [existing] = case["request"]["attachments"]["Attachment.nodewarden.io/v1alpha1"].values()
    if same:
        case["observed"]["discovery"]["memberships"] = [list(m) for m in
                                                        targets.from_attachment_spec(existing["spec"])]
    if env:
        case["env"] = {**(case.get("env") or {}), **env}
    return case, existing


def test_the_same_load_balancers_leave_the_attachment_as_it_is():
    case, existing = _case(same=True)
    response = decide_case("node-detacher", case)["response"]
    [attachment] = response["attachments"]
    assert attachment["spec"]["discoveredAt"] == existing["spec"]["discoveredAt"]
    key = lambda t: (t["arn"], t["targetPort"])  # noqa: E731
    assert sorted(attachment["spec"]["awsTargets"], key=key) == sorted(existing["spec"]["awsTargets"], key=key)
    assert "resyncAfterSeconds" not in response, "the decorator's own resync looks again"


def test_changed_load_balancers_are_written_with_when_they_were_found():
    case, existing = _case(same=False)
    [attachment] = decide_case("node-detacher", case)["response"]["attachments"]
    assert attachment["spec"]["discoveredAt"] == case["observed"]["discovery"]["discoveredAt"]
    assert attachment["spec"]["awsTargets"] != existing["spec"]["awsTargets"]


def test_a_refresh_shorter_than_the_decorators_resync_asks_for_its_own():
    case, _ = _case(same=True, env={"NODEWARDEN_DISCOVERY_REFRESH_SECONDS": "60"})
    assert decide_case("node-detacher", case)["response"]["resyncAfterSeconds"] == 60


def test_the_node_decorator_has_no_burst_resync_and_every_node_answer_asks_for_a_look_within_the_period(make_ctx):
    """Metacontroller's resyncPeriodSeconds re-lists every Node at once; each Node's own timer replaces it."""
    import yaml

    from hooks.controllers import node

    manifest = yaml.safe_load((pathlib.Path(__file__).parents[1] / "metacontroller" / "node.yaml").read_text())
    assert "resyncPeriodSeconds" not in manifest["spec"]
    settings = make_ctx(env={"NODEWARDEN_NODE_RESYNC_SECONDS": "120"}).settings
    assert node.merge(_Parent(), [{}, {}], settings.node_resync_seconds)["resyncAfterSeconds"] == 120
    assert node.merge(_Parent(), [{"resyncAfterSeconds": 5}, {}], 120)["resyncAfterSeconds"] == 5


class _Parent:
    parent: dict = {}
