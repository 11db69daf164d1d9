"""A node's owners on the API server (hooks/kube/owner_api.py): Karpenter NodeClaims and Cluster API Machines.

The API server is worlds/fake_kube.FakeKube (no unit-level API server here): it honours a delete's uid
precondition, a JSON patch's test ops, the status subresource (a patch there writes status alone) and
answers a plain-text 404 for a type it does not serve. The status written is checked against Cluster API
v1.14.2's own Machine CRD schema when its module is in the Go module cache, and every condition as the
MachineHealthCheck and MachineSet controllers of that release read them.
"""
from __future__ import annotations

import copy
import pathlib
import shutil

import pytest
import yaml

from hooks.kube import owner_api
from hooks.owner_names import CAPI_HEALTH_CHECK_SUCCEEDED, CAPI_OWNER_REMEDIATED
from tests.support.owner_objects import CAPI_NAMESPACE, capi_machine, nodeclaim
from worlds.fake_kube import FakeKube

T0, T1 = "2026-11-27T10:00:00Z", "2026-11-27T10:05:00Z"


def _stored(kube: FakeKube, name: str) -> dict:
    return kube.objects[("Machine", CAPI_NAMESPACE, name)]


def _conditions(machine: dict) -> dict:
    return {c["type"]: c for c in machine["status"].get("conditions") or []}


def _v1beta1(machine: dict) -> dict:
    return {c["type"]: c for c in ((machine["status"].get("deprecated") or {}).get("v1beta1") or {})
            .get("conditions") or []}


def _is_false(conditions: dict, kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "False"


def _remediated_by_owner(machine: dict) -> bool:
    """What the MachineSet and KubeadmControlPlane controllers select to remediate (util/collections
    IsUnhealthyAndOwnerRemediated, HasDeletionTimestamp excluded)."""
    c = _conditions(machine)
    return _is_false(c, CAPI_HEALTH_CHECK_SUCCEEDED) and _is_false(c, CAPI_OWNER_REMEDIATED) \
        and not machine["metadata"].get("deletionTimestamp")


@pytest.fixture(scope="module")
def machine_status_schema():
    """The status schema of Cluster API v1.14.2's Machine CRD at v1beta2, from the Go module cache."""
    if shutil.which("go") is None:
        pytest.skip("Go is not on PATH")
    from tests.support.builds import go_env

    crd_file = pathlib.Path(go_env("GOMODCACHE")) / "sigs.k8s.io" / "cluster-api@v1.14.2" / "core" / "config" \
        / "crd" / "bases" / "cluster.x-k8s.io_machines.yaml"
    if not crd_file.is_file():
        pytest.skip("Cluster API v1.14.2 is not in the Go module cache")
    crd = yaml.safe_load(crd_file.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
    assert version["subresources"] == {"status": {}}, "status is a subresource: written there alone"
    return version["schema"]["openAPIV3Schema"]["properties"]["status"]


def _valid(status: dict, schema: dict) -> None:
    import jsonschema

    jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker()).validate(status)


# -- NodeClaims ----------------------------------------------------------------------------------------------

def test_nodeclaims_for_a_provider_id_are_those_whose_status_says_so():
    kube = FakeKube([nodeclaim("a", "u-a", "aws:///z/i-1", "n1"), nodeclaim("b", "u-b", "aws:///z/i-2", "n2"),
                     nodeclaim("launching", "u-c", "", "")])
    assert [c["metadata"]["name"] for c in owner_api.nodeclaims_for(kube, "aws:///z/i-1")] == ["a"]
    assert owner_api.nodeclaims_for(kube, "aws:///z/i-9") == []
    kube.calls.clear()
    assert owner_api.nodeclaims_for(kube, "") == [] and kube.calls == [], "no providerID: nothing to look for"


def test_nodeclaims_in_a_pool_are_those_karpenter_labelled_for_it():
    kube = FakeKube([nodeclaim("a", "u-a", "aws:///z/i-1", "n1", pool="general"),
                     nodeclaim("b", "u-b", "aws:///z/i-2", "n2", pool="gpu"),
                     nodeclaim("c", "u-c", "aws:///z/i-3", "n3", pool="general")])
    assert [c["metadata"]["name"] for c in owner_api.nodeclaims_in_pool(kube, "general")] == ["a", "c"]
    assert owner_api.nodeclaims_in_pool(kube, "other") == []


def test_without_karpenter_there_are_no_nodeclaims_and_a_delete_finds_none():
    kube = FakeKube(without_crds=("NodeClaim",))
    assert owner_api.nodeclaims_for(kube, "aws:///z/i-1") == []
    assert owner_api.nodeclaims_in_pool(kube, "general") == []
    assert owner_api.delete_nodeclaim(kube, "a", "u-a") == owner_api.GONE


def test_a_nodeclaim_is_deleted_only_with_its_uid():
    kube = FakeKube([nodeclaim("a", "u-a", "aws:///z/i-1", "n1")])
    assert owner_api.delete_nodeclaim(kube, "a", "u-other") == owner_api.GONE, "a namesake is another object"
    assert ("NodeClaim", "", "a") in kube.objects
    ((verb, kind, name, _, options),) = [c for c in kube.calls if c[0] == "delete_with_options"]
    assert (kind, name, options["preconditions"]) == ("NodeClaim", "a", {"uid": "u-other"})
    assert owner_api.delete_nodeclaim(kube, "a", "u-a") == owner_api.DELETED
    assert ("NodeClaim", "", "a") not in kube.objects
    assert owner_api.delete_nodeclaim(kube, "a", "u-a") == owner_api.GONE, "deleted already: gone, not an error"


def test_a_nodeclaim_delete_the_api_server_refuses_is_an_error():
    kube = FakeKube([nodeclaim("a", "u-a", "aws:///z/i-1", "n1")])
    kube.refused.add(("delete_with_options", "NodeClaim"))
    with pytest.raises(Exception, match="500|refused"):
        owner_api.delete_nodeclaim(kube, "a", "u-a")
    assert ("NodeClaim", "", "a") in kube.objects


# -- Cluster API Machines: reads -------------------------------------------------------------------------------

def test_a_capi_machine_is_read_from_its_namespace():
    kube = FakeKube([capi_machine("m1", "u1")])
    assert owner_api.capi_machine(kube, CAPI_NAMESPACE, "m1")["metadata"]["uid"] == "u1"
    assert owner_api.capi_machine(kube, "other", "m1") is None
    assert owner_api.capi_machine(FakeKube(without_crds=("Machine",)), CAPI_NAMESPACE, "m1") is None


def test_a_capi_machine_read_the_api_server_refuses_is_an_error():
    kube = FakeKube([capi_machine("m1", "u1")])
    kube.refused.add(("get", "Machine"))
    with pytest.raises(Exception, match="500|refused"):
        owner_api.capi_machine(kube, CAPI_NAMESPACE, "m1")


def test_a_machines_group_is_its_controllers_machines():
    ms_a = {"kind": "MachineSet", "name": "md-a-1", "uid": "ms-a"}
    ms_b = {"kind": "MachineSet", "name": "md-a-2", "uid": "ms-b"}
    machines = [capi_machine("m1", "u1", owner=ms_a, deployment="md-a"), capi_machine("m2", "u2", "n2", owner=ms_a),
                capi_machine("m3", "u3", "n3", owner=ms_b, deployment="md-a"), capi_machine("m4", "u4", "n4")]
    kube = FakeKube(machines + [capi_machine("m5", "u5", "n5", owner=ms_a, namespace="other")])
    group = owner_api.capi_machines_in_group(kube, CAPI_NAMESPACE, machines[0])
    assert sorted(m["metadata"]["name"] for m in group) == ["m1", "m2"], "its MachineSet's, in its namespace"


def test_without_a_controller_a_machines_group_is_its_deployments_then_itself():
    machines = [capi_machine("m1", "u1", deployment="md-a"), capi_machine("m2", "u2", "n2", deployment="md-a"),
                capi_machine("m3", "u3", "n3", deployment="md-b"), capi_machine("m4", "u4", "n4")]
    kube = FakeKube(machines)

    def group(machine):
        return sorted(m["metadata"]["name"] for m in owner_api.capi_machines_in_group(kube, CAPI_NAMESPACE, machine))

    assert group(machines[0]) == ["m1", "m2"]
    assert group(machines[3]) == ["m4"]
    assert owner_api.capi_machines_in_group(FakeKube(without_crds=("Machine",)), CAPI_NAMESPACE, machines[0]) == []


# -- Cluster API Machines: the owner asked to remediate --------------------------------------------------------

def test_the_mark_is_what_a_machinehealthcheck_writes_on_the_status_subresource(machine_status_schema):
    kube = FakeKube([capi_machine("m1", "u1", status={"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": T0}]})])
    assert owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "Node n1 fenced: powered off", T1) \
        == owner_api.DONE
    ((kind, ops),) = [(c[1], c[3]) for c in kube.calls if c[0] == "json_patch"]
    assert kind == "Machine/status"
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": "u1"}
    machine = _stored(kube, "m1")
    conditions = _conditions(machine)
    assert conditions["Ready"]["status"] == "True", "the others stay"
    assert conditions[CAPI_HEALTH_CHECK_SUCCEEDED] == {
        "type": "HealthCheckSucceeded", "status": "False", "reason": "UnhealthyNode",
        "message": "Node n1 fenced: powered off", "observedGeneration": 3, "lastTransitionTime": T1}
    assert conditions[CAPI_OWNER_REMEDIATED] == {
        "type": "OwnerRemediated", "status": "False", "reason": "WaitingForRemediation",
        "message": "Waiting for remediation", "observedGeneration": 3, "lastTransitionTime": T1}
    assert _v1beta1(machine) == {
        "HealthCheckSucceeded": {"type": "HealthCheckSucceeded", "status": "False", "severity": "Warning",
                                 "reason": "UnhealthyNode", "message": "Node n1 fenced: powered off",
                                 "lastTransitionTime": T1},
        "OwnerRemediated": {"type": "OwnerRemediated", "status": "False", "severity": "Warning",
                            "reason": "WaitingForRemediation", "lastTransitionTime": T1}}
    assert _remediated_by_owner(machine)
    _valid(machine["status"], machine_status_schema)


def test_the_mark_on_a_machine_without_status_makes_it(machine_status_schema):
    machine = capi_machine("m1", "u1", node=None)
    del machine["status"]
    kube = FakeKube([machine])
    assert owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "", T1) == owner_api.DONE
    stored = _stored(kube, "m1")
    assert _remediated_by_owner(stored)
    assert "message" not in _v1beta1(stored)["HealthCheckSucceeded"], "v1beta1: an empty message is left out"
    _valid(stored["status"], machine_status_schema)


def test_marking_again_writes_nothing_and_keeps_the_transition_times():
    kube = FakeKube([capi_machine("m1", "u1")])
    owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced", T0)
    before = copy.deepcopy(_stored(kube, "m1")["status"])
    kube.calls.clear()
    assert owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced", T1) == owner_api.DONE
    assert [c[0] for c in kube.calls] == ["get"]
    assert _stored(kube, "m1")["status"] == before


def test_a_new_message_moves_v1beta1s_transition_time_and_not_v1beta2s():
    kube = FakeKube([capi_machine("m1", "u1")])
    owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced", T0)
    owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced again", T1)
    machine = _stored(kube, "m1")
    assert _conditions(machine)[CAPI_HEALTH_CHECK_SUCCEEDED]["lastTransitionTime"] == T0
    assert _conditions(machine)[CAPI_HEALTH_CHECK_SUCCEEDED]["message"] == "fenced again"
    assert _v1beta1(machine)[CAPI_HEALTH_CHECK_SUCCEEDED]["lastTransitionTime"] == T1


def test_a_healthy_machine_turns_unhealthy_and_a_finished_remediation_is_asked_again():
    status = {"conditions": [
        {"type": "HealthCheckSucceeded", "status": "True", "reason": "HealthCheckSucceeded", "message": "",
         "observedGeneration": 3, "lastTransitionTime": T0},
        {"type": "OwnerRemediated", "status": "True", "reason": "Remediated", "message": "",
         "observedGeneration": 3, "lastTransitionTime": T0}],
        "deprecated": {"v1beta1": {"conditions": [
            {"type": "HealthCheckSucceeded", "status": "True", "lastTransitionTime": T0}]}}}
    kube = FakeKube([capi_machine("m1", "u1", status=status)])
    owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced", T1)
    machine = _stored(kube, "m1")
    assert {k: (c["status"], c["lastTransitionTime"]) for k, c in _conditions(machine).items()} == {
        CAPI_HEALTH_CHECK_SUCCEEDED: ("False", T1), CAPI_OWNER_REMEDIATED: ("False", T1)}
    assert {k: c["status"] for k, c in _v1beta1(machine).items()} == {CAPI_HEALTH_CHECK_SUCCEEDED: "False",
                                                                       CAPI_OWNER_REMEDIATED: "False"}
    assert _remediated_by_owner(machine)


def test_a_remediation_in_progress_is_left_to_the_owner():
    in_progress = {"type": "OwnerRemediated", "status": "False", "reason": "MachineDeleting",
                   "message": "Machine is deleting", "observedGeneration": 3, "lastTransitionTime": T0}
    in_progress_v1beta1 = {"type": "OwnerRemediated", "status": "False", "severity": "Warning",
                           "reason": "RemediationInProgress", "lastTransitionTime": T0}
    kube = FakeKube([capi_machine("m1", "u1", status={"conditions": [in_progress],
                                                  "deprecated": {"v1beta1": {"conditions": [in_progress_v1beta1]}}})])
    owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced", T1)
    machine = _stored(kube, "m1")
    assert _conditions(machine)[CAPI_OWNER_REMEDIATED] == in_progress
    assert _v1beta1(machine)[CAPI_OWNER_REMEDIATED] == in_progress_v1beta1
    assert _conditions(machine)[CAPI_HEALTH_CHECK_SUCCEEDED]["status"] == "False"


def test_a_machine_being_deleted_gets_no_owner_remediation():
    kube = FakeKube([capi_machine("m1", "u1", deletionTimestamp=T0, finalizers=["machine.cluster.x-k8s.io"])])
    assert owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced", T1) == owner_api.DONE
    machine = _stored(kube, "m1")
    assert set(_conditions(machine)) == {CAPI_HEALTH_CHECK_SUCCEEDED} == set(_v1beta1(machine))


def test_only_the_machine_of_the_uid_is_marked():
    kube = FakeKube([capi_machine("m1", "u-new")])
    assert owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u-old", "fenced", T1) == owner_api.GONE
    assert CAPI_HEALTH_CHECK_SUCCEEDED not in _conditions(_stored(kube, "m1"))
    assert owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "gone", "u1", "fenced", T1) == owner_api.GONE
    assert owner_api.mark_capi_remediation(FakeKube(without_crds=("Machine",)), CAPI_NAMESPACE, "m1", "u1", "fenced", T1) \
        == owner_api.GONE


def test_a_namesake_made_between_the_read_and_the_write_is_not_marked():
    class Replaced(FakeKube):
        def get(self, res, name, namespace=None):
            read = super().get(res, name, namespace)
            if not getattr(self, "replaced", False):
                self.replaced = True
                self.add_object(capi_machine("m1", "u-new"))  # deleted and made again, resourceVersion and all
            return read

    kube = Replaced([capi_machine("m1", "u1")])
    assert owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced", T1) == owner_api.GONE
    assert CAPI_HEALTH_CHECK_SUCCEEDED not in _conditions(_stored(kube, "m1"))


def test_a_status_written_meanwhile_is_read_again_and_kept():
    class Racing(FakeKube):
        def get(self, res, name, namespace=None):
            read = super().get(res, name, namespace)
            if not getattr(self, "raced", False):
                self.raced = True  # the Machine controller writes its status after our read
                self.json_patch(owner_api.CAPI_MACHINE.Status, name, [{"op": "add", "path": "/status/phase",
                                                                    "value": "Provisioned"}], namespace)
            return read

    kube = Racing([capi_machine("m1", "u1")])
    assert owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced", T1) == owner_api.DONE
    machine = _stored(kube, "m1")
    assert machine["status"]["phase"] == "Provisioned" and _remediated_by_owner(machine)
    assert [c[0] for c in kube.calls].count("get") == 2


def test_a_mark_the_api_server_keeps_refusing_is_an_error():
    kube = FakeKube([capi_machine("m1", "u1")])
    kube.refused.add(("json_patch", "Machine/status"))
    with pytest.raises(Exception, match="500|refused"):
        owner_api.mark_capi_remediation(kube, CAPI_NAMESPACE, "m1", "u1", "fenced", T1)
    assert CAPI_HEALTH_CHECK_SUCCEEDED not in _conditions(_stored(kube, "m1"))
