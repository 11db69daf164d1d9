"""The hook contract as the current Metacontroller sends it: recorded v4.17.2 requests through the real app.

tests/recorded/metacontroller-v4.17.2/ holds the first request bodies, with
their headers, that Metacontroller v4.17.2 sent to these hooks while the e2e
suite ran (every hook declared `version: v2`). Each is posted, byte for byte
and with the headers it came with, to the WSGI app the server runs; the answer
must be a 2xx that v4's strict v2 decoder accepts (tests/v4_decoder.py).
Kubernetes and AWS are unreachable here, so each hook answers with what it
could do without them, and nothing is changed anywhere.
"""
from __future__ import annotations

import json
import pathlib

import pytest

from hooks import controllers, runtime
from hooks.app import create_app
from hooks.config import load_settings
from hooks.contract import DECORATOR, RequestError, parse_request
from tests.hook_server import QUIET_WORLD
from tests.v4_decoder import check_response

RECORDED = pathlib.Path(__file__).parent / "recorded" / "metacontroller-v4.17.2"
FILES = sorted(RECORDED.glob("*.json"))


def _route(path: pathlib.Path) -> tuple[str, str]:
    controller, hook = path.stem.rsplit("-", 1)[0].rsplit("-", 1)
    return controller, hook


@pytest.fixture(scope="module")
def client():
    return create_app(runtime.Context(load_settings({**QUIET_WORLD, "NODEWARDEN_LOG_LEVEL": "ERROR"}),
                                      events_inline=True)).test_client()


# The DecoratorController ``node`` took over the Nodes of node-detacher and node-fencing after these were
# recorded; v4 sends it the same Node requests (the same controller kind and hook version), so theirs serve it.
SERVED_BY = {"node": ("node-detacher", "node-fencing")}
NODE_FILES = [p for p in FILES if _route(p)[0] in SERVED_BY["node"]]


def test_every_controller_and_hook_we_serve_has_recorded_requests():
    recorded = {_route(p) for p in FILES}
    recorded |= {(name, hook) for name, concerns in SERVED_BY.items() for concern, hook in recorded
                 if concern in concerns}
    for name in controllers.CONTROLLERS:
        _, module = controllers.load(name)
        for hook in ("sync", "finalize", "customize"):
            if hasattr(module, hook):
                assert (name, hook) in recorded, f"no recorded v4 request for {name}/{hook}"


@pytest.mark.parametrize("path", NODE_FILES, ids=[p.stem for p in NODE_FILES])
def test_a_recorded_v4_node_request_is_answered_by_the_node_controller_as_v4_accepts(client, path):
    record = json.loads(path.read_text())
    _, hook = _route(path)
    reply = client.post(f"/node/{hook}", data=json.dumps(record["body"]).encode(), headers=record["headers"])
    assert 200 <= reply.status_code < 300, reply.get_data(as_text=True)
    assert check_response(DECORATOR, hook, reply.get_data()) == []


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_recorded_v4_request_is_answered_as_v4_accepts(client, path):
    record = json.loads(path.read_text())
    assert (record["metacontroller"], record["hookVersion"]) == ("v4.17.2", "v2")
    controller, hook = _route(path)
    kind, _ = controllers.load(controller)
    body = record["body"]
    if hook == "customize":
        assert set(body) == {"controller", "parent"}
    else:  # both versions use these names; v2 changes only the keys inside each group
        names = ("object", "attachments") if kind == DECORATOR else ("parent", "children")
        assert set(body) == {"controller", *names, "related", "finalizing"}
    reply = client.post(f"/{controller}/{hook}", data=json.dumps(body).encode(), headers=record["headers"])
    assert 200 <= reply.status_code < 300, reply.get_data(as_text=True)
    assert check_response(kind, hook, reply.get_data()) == []


def test_the_v2_decorator_shape_is_object_and_attachments_not_the_go_field_names():
    """The v2 decorator request type's Go fields are Parent/Children; on the wire they are object/attachments."""
    record = json.loads((RECORDED / "node-detacher-sync-0.json").read_text())
    body = record["body"]
    assert body["controller"]["spec"]["hooks"]["sync"]["version"] == "v2"
    request = parse_request(body, DECORATOR, "sync")
    assert request.version == "v2" and request.parent == body["object"]
    renamed = {("parent" if k == "object" else "children" if k == "attachments" else k): v for k, v in body.items()}
    with pytest.raises(RequestError) as err:
        parse_request(renamed, DECORATOR, "sync")
    assert err.value.field == "object"


@pytest.mark.parametrize("text,problem", [
    ('{"labels": {}, "labels": {}}', "duplicate"),
    ('{"Labels": {}}', "unknown field"),
    ('{"children": []}', "unknown field"),
    ('{"labels": {"a": 1}}', "want a string"),
    ('{"resyncAfterSeconds": "5"}', "want a number"),
    ('{"finalized": "true"}', "want a boolean"),
    ('{"attachments": [{"apiVersion": "v1"}]}', "kind"),
])
def test_the_decoder_refuses_what_v4_refuses(text, problem):
    """The checker above is only worth something if it can say no."""
    errors = check_response("decorator", "sync", text)
    assert errors and problem in " ".join(errors), errors


def test_the_decoder_accepts_nulls_as_go_does():
    assert check_response("decorator", "sync", '{"labels": {"a": null}, "status": null, "attachments": null}') == []
    assert check_response("customize", "customize",
                          '{"relatedResources": [{"apiVersion": "v1", "resource": "nodes", "labelSelector": '
                          '{"matchLabels": {"a": "b"}}, "names": ["n"]}]}') == []
    assert check_response("composite", "customize", '{"relatedResources": [{"resource": 1}]}') != []
