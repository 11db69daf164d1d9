"""The hook contract as the current Metacontroller sends it: recorded v4.17.2 requests through the real app.

tests/contract/recorded/metacontroller-v4.17.2/ holds the first request bodies, with
their headers, that Metacontroller v4.17.2 sent to these hooks while the e2e
suite ran (every hook declared `version: v2`). A controller added since (v4
cannot be built here today) is checked with its own fixture in the keys and
headers v4 sent to a controller of the same kind and hook, and says so. Each is posted, byte for byte
and with the headers it came with, to the WSGI app the server runs; the answer
must be a 2xx that v4's strict v2 decoder accepts (tests/support/v4_decoder.py).
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
from tests.support.hook_server import QUIET_WORLD
from tests.support.v4_decoder import check_response

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
NODE_FILES = [p for p in FILES if _route(p)[0] in SERVED_BY["node"]
              and hasattr(controllers.load("node")[1], _route(p)[1])]
FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"
HOOKS = ("sync", "finalize", "customize")


def _unrecorded() -> list[tuple[str, str, pathlib.Path | None, pathlib.Path | None]]:
    """(controller, hook, a recorded request of the same kind and hook, a fixture) for each hook served that
    v4.17.2 was not recorded calling: controllers added since the recording (v4 cannot be built here today)."""
    recorded = {_route(p) for p in FILES}
    recorded |= {(name, hook) for name, concerns in SERVED_BY.items() for concern, hook in recorded
                 if concern in concerns}
    found = []
    for name in controllers.CONTROLLERS:
        kind, module = controllers.load(name)
        for hook in HOOKS:
            if not hasattr(module, hook) or (name, hook) in recorded:
                continue
            envelope = next((p for p in FILES if _route(p)[1] == hook
                             and controllers.load(_route(p)[0])[0] == kind), None)
            # A customize request is the controller and the parent: any of the controller's fixtures has one.
            fixture = next((p for p in sorted((FIXTURES / name).glob("*.json"))
                            if not p.stem.endswith("-hook-v1")
                            and hook in (json.loads(p.read_text())["hook"], "customize")), None)
            found.append((name, hook, envelope, fixture))
    return found


UNRECORDED = _unrecorded()


def test_every_controller_and_hook_we_serve_has_a_recorded_request_or_one_of_its_kind():
    for name, hook, envelope, fixture in UNRECORDED:
        assert envelope is not None, f"no recorded v4 request of {name}'s kind for {hook}"
        assert fixture is not None, f"no fixture of {name}/{hook} to post in a recorded envelope"


@pytest.mark.parametrize("name, hook, envelope, fixture", UNRECORDED, ids=[f"{n}-{h}" for n, h, _, _ in UNRECORDED])
def test_an_unrecorded_hook_answers_a_request_of_its_kind_as_v4_accepts(client, name, hook, envelope, fixture):
    """Not a recording: the keys and headers v4.17.2 sent to a controller of the same kind and hook, carrying
    this controller's own fixture objects; the answer must pass v4's decoder all the same."""
    record = json.loads(envelope.read_text())
    kind, _ = controllers.load(name)
    body = json.loads(fixture.read_text())["request"]
    if hook == "customize":
        body = {"controller": record["body"]["controller"], "parent": body.get("parent") or body.get("object")}
    assert set(body) == set(record["body"]), "the fixture has the keys v4 sends for this kind of hook"
    reply = client.post(f"/{name}/{hook}", data=json.dumps(body).encode(), headers=record["headers"])
    assert 200 <= reply.status_code < 300, reply.get_data(as_text=True)
    assert check_response(kind, hook, reply.get_data()) == []


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
