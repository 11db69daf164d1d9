"""Small pure pieces: providerIDs, the request contract, triggers, shutdown order."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hooks.aws import providerid
from hooks.config import ConfigError, load_settings
from hooks.contract import (COMPOSITE, DECORATOR, RequestError, composite_response, decorator_response,
                            parse_request, shape_response)
from hooks.detacher import shutdown


@pytest.mark.parametrize("value,instance,region", [
    ("aws:///us-east-1a/i-0abc12345678", "i-0abc12345678", "us-east-1"),
    ("aws:////i-0abc12345678", "i-0abc12345678", None),
    ("aws:///eu-central-1b/i-0123456789abcdef0", "i-0123456789abcdef0", "eu-central-1"),
    ("aws:///us-east-1-bos-1a/i-0abc12345678", "i-0abc12345678", "us-east-1"),
])
def test_provider_ids(value, instance, region):
    pid = providerid.parse(value)
    assert (pid.instance_id, pid.region) == (instance, region)


@pytest.mark.parametrize("value", [None, "", "gce://p/z/vm", "aws:///us-east-1a/", "aws:///us-east-1a/vol-123"])
def test_bad_provider_ids(value):
    with pytest.raises(providerid.ProviderIDError):
        providerid.parse(value)


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
ATT = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "Attachment", "metadata": {"name": "n1", "namespace": "ns"}}


def test_decorator_v1_and_v2_requests_read_the_same():
    v1 = parse_request({"object": NODE, "attachments": {"Attachment.nodewarden.io/v1alpha1": {"ns/n1": ATT}}}, DECORATOR)
    v2 = parse_request({"parent": NODE, "children": {"Attachment.nodewarden.io/v1alpha1": {"ns/n1": ATT}}}, DECORATOR)
    assert (v1.version, v2.version) == ("v1", "v2")
    assert v1.children.get("Attachment", "n1", "ns") == v2.children.get("Attachment", "n1", "ns") == ATT


def test_composite_version_comes_from_the_controller():
    body = {"parent": NODE, "children": {}, "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}}}
    assert parse_request(body, COMPOSITE, "sync").version == "v2"
    assert parse_request({"parent": NODE}, COMPOSITE, "sync").version == "v1"


@pytest.mark.parametrize("body,field", [
    ({}, "parent"),
    ({"parent": []}, "parent"),
    ({"parent": {"metadata": {}}}, "parent.metadata.name"),
    ({"parent": {"metadata": {"name": "x", "labels": {"a": 1}}}}, "parent.metadata.labels.a"),
    ({"parent": NODE, "finalizing": "yes"}, "finalizing"),
    ({"parent": NODE, "children": {"nokey": {}}}, "children"),
])
def test_bad_requests_name_the_field(body, field):
    with pytest.raises(RequestError) as err:
        parse_request(body, DECORATOR)
    assert err.value.field == field


def test_responses_carry_only_what_strict_v2_parsing_allows():
    assert set(decorator_response(resync_after=3, finalized=True)) <= {
        "labels", "annotations", "status", "attachments", "resyncAfterSeconds", "finalized"}
    with pytest.raises(ValueError):
        shape_response(COMPOSITE, {"status": {}, "labels": {}})
    with pytest.raises(ValueError):
        composite_response(status=None)
    assert shape_response(COMPOSITE, composite_response(status={"phase": "x"})) == {"status": {"phase": "x"}, "children": []}


def test_settings_reject_unreadable_values_by_name():
    with pytest.raises(ConfigError, match="NODEWARDEN_DRAIN_POLL_SECONDS"):
        load_settings({"NODEWARDEN_DRAIN_POLL_SECONDS": "soon"})
    with pytest.raises(ConfigError, match="NODEWARDEN_DETACH_CONTROL_PLANE"):
        load_settings({"NODEWARDEN_DETACH_CONTROL_PLANE": "maybe"})


@given(st.lists(st.tuples(st.integers(-5, 5), st.booleans()), max_size=20))
def test_shutdown_never_starts_a_lower_group_before_a_higher_one_is_gone(pods):
    refs = [shutdown.PodRef("ns", f"p{i}", prio, term) for i, (prio, term) in enumerate(pods)]
    top, group = shutdown.next_group(refs)
    if not refs:
        assert (top, group) == (None, [])
        return
    assert top == max(r.priority for r in refs)
    assert all(r.priority == top and not r.terminating for r in group)
    assert {r.key for r in group} == {r.key for r in refs if r.priority == top and not r.terminating}


def test_fresh_reads_only_known_kinds_at_plain_versions():
    from hooks.kube import fresh

    class NoCalls:
        def get(self, *a, **k):
            raise AssertionError("must not be read")

    for body in ({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x", "uid": "u"}},
                 {"kind": ["AWSCluster"], "metadata": {"name": "x", "uid": "u"}},
                 {"kind": "AWSCluster", "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2/../../secrets",
                  "metadata": {"name": "x", "uid": "u"}},
                 {"kind": "AWSCluster", "apiVersion": "other.group.io/v1", "metadata": {"name": "x", "uid": "u"}},
                 {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "x"}}):
        with pytest.raises(fresh.Unverified):
            fresh.same_object(NoCalls(), body)
