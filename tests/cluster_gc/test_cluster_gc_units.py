"""cluster-gc's pure parts, its runner, its CLI and its HTTP route, without AWS."""
from __future__ import annotations

import argparse

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from hooks import actuators, runtime
from hooks import cli_gc
from hooks.app import create_app
from hooks.aws.gc import resources as r
from hooks.aws.gc import runner
from hooks.cli import build_parser
from hooks.config import load_settings
from hooks.plan import Action, DEFERRED, HELD
from hooks.teardown import ownership, scope
from hooks import teardown_names
from hooks.teardown.tasks import CLASSIC_ELB, DEFAULT_TASKS, EC2_INSTANCE, EIP, ELBV2_LB, ENI, SG, TASK_ORDER, TG, VOL
from worlds.cluster_gc import aws_cluster
from worlds.envelope import hook_request
from worlds.fake_kube import FakeKube


# ------------------------------------------------------------------ parsing


@pytest.mark.parametrize("value,expected", [
    ("true", True), ("True", True), ("TRUE", True), ("t", True), ("T", True), ("1", True),
    ("false", False), ("False", False), ("FALSE", False), ("f", False), ("F", False), ("0", False),
    ("", None), ("yes", None), ("no", None), (" true", None), ("tRuE", None), ("2", None), ("maybe", None),
])
def test_opt_out_value_is_read_like_gos_parse_bool(value, expected):
    assert scope.parse_go_bool(value) is expected


@pytest.mark.parametrize("value,tasks", [
    (None, DEFAULT_TASKS),
    ("", DEFAULT_TASKS),
    ("security-group,load-balancer", ("load-balancer", "security-group")),
    ("volume", ("volume",)),
    (" target-group , volume ,", ("target-group", "volume")),
])
def test_tasks_annotation(value, tasks):
    assert scope.parse_tasks(value) == (tasks, "")


def test_unknown_task_is_a_problem_naming_it():
    tasks, problem = scope.parse_tasks("load-balancer,eni")
    assert tasks == () and "eni" in problem and teardown_names.TASKS_ANNOTATION in problem


@pytest.mark.parametrize("name,namespace,expected", [
    # Computed with CAPA's own GenerateEKSName code path (Go, blake2b) for these inputs.
    ("my.cp", "default", "default_my_cp"),
    ("a" * 95, "team-x", "capa_kcp9d8a90yju36stzwbd8n86t7g"),
    ("b" * 92, "default", "capa_8tfmfrecyljnrgn4iym6esmhcf2"),  # exactly 100 bytes: hashed
    ("b" * 91, "default", "default_" + "b" * 91),  # 99 bytes: kept
])
def test_default_eks_cluster_name_matches_capa(name, namespace, expected):
    assert scope.eks_cluster_name(name, namespace) == expected


def test_cluster_name_prefers_the_label_then_the_owning_cluster():
    parent = aws_cluster(cluster="from-label")
    parent["metadata"]["ownerReferences"] = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                              "name": "from-owner", "uid": "u"}]
    assert scope.cluster_name(parent) == ("from-label", "")
    del parent["metadata"]["labels"]
    assert scope.cluster_name(parent) == ("from-owner", "")
    # An owner that is not a Cluster API Cluster does not count.
    parent["metadata"]["ownerReferences"][0]["apiVersion"] = "example.com/v1"
    assert scope.cluster_name(parent)[0] == ""


@pytest.mark.parametrize("arn,parsed", [
    ("arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/net/web/abc", (ELBV2_LB, "arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/net/web/abc")),
    ("arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/app/web/abc", (ELBV2_LB, "arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/app/web/abc")),
    ("arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/a1b2c3", (CLASSIC_ELB, "a1b2c3")),
    ("arn:aws:elasticloadbalancing:us-east-1:1:targetgroup/k8s-web/abc", (TG, "arn:aws:elasticloadbalancing:us-east-1:1:targetgroup/k8s-web/abc")),
    ("arn:aws-cn:ec2:cn-north-1:1:security-group/sg-0abc", (SG, "sg-0abc")),
    ("arn:aws:ec2:us-east-1:1:volume/vol-0abc", (VOL, "vol-0abc")),
    ("arn:aws:elasticloadbalancing:us-east-1:1:listener/net/web/abc/def", None),
    ("arn:aws:ec2:us-east-1:1:instance/i-0abc", (EC2_INSTANCE, "i-0abc")),
    ("arn:aws:ec2:us-east-1:1:network-interface/eni-0abc", (ENI, "eni-0abc")),
    ("arn:aws:ec2:us-east-1:1:elastic-ip/eipalloc-0abc", (EIP, "eipalloc-0abc")),
    ("arn:aws:ec2:us-east-1:1:subnet/subnet-0abc", None),
    ("arn:aws:ec2:us-east-1:1:instance/", None),
    ("not-an-arn", None),
])
def test_arns_are_classified(arn, parsed):
    assert r.parse_arn(arn) == parsed


def test_who_made_a_resource():
    ccm = {"kubernetes.io/cluster/c": "owned", "kubernetes.io/service-name": "ns/svc"}
    assert ownership.made_by(ELBV2_LB, ccm, "c", False) == ownership.CLOUD_CONTROLLER
    assert ownership.made_by(ELBV2_LB, ccm, "other", False) is None
    assert ownership.made_by(TG, {"kubernetes.io/cluster/c": "shared", "kubernetes.io/service-name": "x"}, "c", False) is None
    lbc = {"elbv2.k8s.aws/cluster": "c"}
    assert ownership.made_by(TG, lbc, "c", False) is None
    assert ownership.made_by(TG, lbc, "c", True) == ownership.LB_CONTROLLER
    assert ownership.made_by(SG, {"kubernetes.io/cluster/c": "owned"}, "c", False) == ownership.CLOUD_CONTROLLER
    assert ownership.made_by(SG, {"kubernetes.io/cluster/c": "owned", "aws:eks:cluster-name": "c"}, "c", True) is None
    assert ownership.made_by(VOL, {"kubernetes.io/cluster/c": "owned"}, "c", False) is None
    assert ownership.made_by(VOL, {"kubernetes.io/cluster/c": "owned", "CSIVolumeName": "pvc-1"}, "c", False)


# ------------------------------------------------------------------- runner


def _action(ident: str, stage: int, kind: str = TG) -> Action:
    return Action("aws.delete", ident, {"kind": kind, "task": TASK_ORDER[stage], "stage": stage, "region": "r"})


def _error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "Op")


class FakeDelete:
    def __init__(self, errors: dict | None = None, clock=None, step: float = 0.0):
        self.errors, self.calls, self.clock, self.step = errors or {}, [], clock, step

    def __call__(self, aws, kind, region, ident):
        self.calls.append(ident)
        if self.clock:
            self.clock.t += self.step
        if ident in self.errors:
            raise self.errors[ident]
        return r.DELETED


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _run(monkeypatch, delete, actions, budget=float("inf"), clock=None, started=0.0):
    """cluster-gc's deletes through the one actuator path, with AWS's delete replaced by ``delete``."""
    import hooks.aws.gc as gc_module

    monkeypatch.setattr(gc_module, "delete", delete)
    ctx = runtime.Context(load_settings({"AWS_REGION": "us-east-1"}), events_inline=True)
    gate = runner.StageGate(budget, clock or FakeClock())
    return [runner.classify(o) for o in actuators.act("cluster-gc", actions, ctx, gate, started)]


def test_a_later_task_waits_for_every_earlier_one_of_the_call(monkeypatch):
    delete = FakeDelete({"lb2": _error("OperationNotPermitted")})
    actions = [_action("lb1", 0), _action("lb2", 0), _action("lb3", 0), _action("tg1", 1), _action("sg1", 2)]
    results = _run(monkeypatch, delete, actions)
    assert delete.calls == ["lb1", "lb2", "lb3"]  # the whole stage is tried, the next ones are held
    assert results == [r.DELETED, runner.FAILED, r.DELETED, HELD, HELD]


def test_in_use_and_throttling_are_classified_and_throttling_stops_the_call(monkeypatch):
    delete = FakeDelete({"tg1": _error("ResourceInUse"), "tg2": _error("Throttling")})
    actions = [_action("tg1", 1), _action("tg2", 1), _action("tg3", 1)]
    assert _run(monkeypatch, delete, actions) == [runner.IN_USE, runner.THROTTLED, DEFERRED]
    assert delete.calls == ["tg1", "tg2"]


def test_the_time_budget_defers_the_rest_but_the_first_action_always_runs(monkeypatch):
    clock = FakeClock()
    clock.t = 10.0  # discovery already used the whole budget
    delete = FakeDelete(clock=clock, step=0.1)
    assert _run(monkeypatch, delete, [_action("a", 0), _action("b", 0)], budget=5.0, clock=clock) == \
        [r.DELETED, DEFERRED]

    clock.t = 0.0
    delete = FakeDelete(clock=clock, step=0.4)
    results = _run(monkeypatch, delete, [_action(str(i), 0) for i in range(5)], budget=1.0, clock=clock)
    assert results.count(r.DELETED) == 3  # at 0.0, 0.4, 0.8; then out of time


def test_an_unreachable_endpoint_stops_the_call(monkeypatch):
    delete = FakeDelete({"a": EndpointConnectionError(endpoint_url="http://127.0.0.1:9")})
    assert _run(monkeypatch, delete, [_action("a", 0), _action("b", 0)]) == [runner.FAILED, DEFERRED]
    assert delete.calls == ["a"]


# ---------------------------------------------------------------------- CLI


def _obj(kind, name, namespace="ns", labels=None, spec=None):
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec or {}}


def _args(*argv):
    return build_parser().parse_args(["gc", *argv])


def test_cli_follows_the_capi_cluster_to_its_infrastructure(capsys):
    kube = FakeKube([
        _obj("Cluster", "prod", spec={"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                                                             "kind": "AWSCluster", "name": "prod-x1"}}),
        _obj("AWSCluster", "prod-x1"),
    ])
    assert cli_gc.run(_args("disable", "--cluster-name", "prod", "-n", "ns"), kube=kube) == 0
    assert kube.patches == [("AWSCluster", "ns", "prod-x1",
                             {"metadata": {"annotations": {teardown_names.GC_ANNOTATION: "false"}}})]
    assert "AWSCluster ns/prod-x1" in capsys.readouterr().out


def test_cli_eks_cluster_annotates_the_control_plane():
    kube = FakeKube([
        _obj("Cluster", "eks", spec={"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                            "kind": "AWSManagedCluster", "name": "eks"},
                                     "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                                                         "kind": "AWSManagedControlPlane", "name": "eks-cp"}}),
    ])
    assert cli_gc.run(_args("enable", "--cluster-name", "eks", "-n", "ns"), kube=kube) == 0
    assert kube.patches[0][:3] == ("AWSManagedControlPlane", "ns", "eks-cp")


def test_cli_without_cluster_api_uses_the_label_then_the_name():
    kube = FakeKube([_obj("AWSCluster", "alpha-infra", labels={teardown_names.CLUSTER_NAME_LABEL: "alpha"}),
                     _obj("AWSManagedControlPlane", "beta")], without_crds=("Cluster",))
    assert cli_gc.run(_args("configure", "--cluster-name", "alpha", "-n", "ns",
                            "--gc-task", "security-group,load-balancer", "--gc-task", "volume"), kube=kube) == 0
    assert kube.patches[-1] == ("AWSCluster", "ns", "alpha-infra", {"metadata": {"annotations": {
        teardown_names.TASKS_ANNOTATION: "load-balancer,security-group,volume"}}})
    assert cli_gc.run(_args("configure", "--cluster-name", "beta", "-n", "ns"), kube=kube) == 0
    assert kube.patches[-1] == ("AWSManagedControlPlane", "ns", "beta",
                                {"metadata": {"annotations": {teardown_names.TASKS_ANNOTATION: None}}})


def test_cli_errors_are_plain(capsys):
    kube = FakeKube([])
    assert cli_gc.run(_args("enable", "--cluster-name", "ghost", "-n", "ns"), kube=kube) == 1
    assert "no Cluster, AWSCluster or AWSManagedControlPlane" in capsys.readouterr().err
    assert cli_gc.run(_args("configure", "--cluster-name", "x", "--gc-task", "nat"), kube=kube) == 2
    assert kube.patches == []
    with pytest.raises(argparse.ArgumentTypeError):
        cli_gc.parse_gc_tasks(["load-balancer", "eni"])


# --------------------------------------------------------------------- HTTP


@pytest.fixture(scope="module")
def client():
    env = {"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    ctx = runtime.Context(load_settings(env), events_inline=True)
    ctx._kube = FakeKube()
    ctx._kube.add_object(aws_cluster())  # the API server has the deleting cluster the requests name
    return create_app(ctx).test_client()


def test_sync_route_changes_nothing(client):
    body = hook_request("cluster-gc", aws_cluster(deleting=False))
    reply = client.post("/cluster-gc/sync", json=body)
    assert reply.status_code == 200
    assert reply.get_json() == {"labels": {}, "annotations": {}, "status": None, "attachments": []}


def test_finalize_route_v1_body_with_aws_unreachable_answers_200_and_holds(client):
    # Hook v1 (what Metacontroller v1.x always sends): the parent is "object". AWS is unreachable: held, not a 500.
    body = hook_request("cluster-gc", aws_cluster(), version="v1", finalizing=True)
    reply = client.post("/cluster-gc/finalize", json=body)
    assert reply.status_code == 200
    data = reply.get_json()
    assert data["finalized"] is False and data["status"] is None
    assert data["annotations"][teardown_names.LAST_ERROR].startswith("discovery failed:")


def test_finalize_route_refuses_a_cluster_the_api_server_does_not_have(client):
    forged = aws_cluster(name="prod", cluster="prod")
    reply = client.post("/cluster-gc/finalize", json=hook_request("cluster-gc", forged, finalizing=True))
    assert reply.status_code == 200
    data = reply.get_json()
    assert data["finalized"] is False
    assert "does not exist on the API server" in data["annotations"][teardown_names.LAST_ERROR]


def test_finalize_route_rejects_a_malformed_request(client):
    parent = aws_cluster()
    parent["metadata"]["ownerReferences"] = "not-a-list"
    del parent["metadata"]["labels"]
    reply = client.post("/cluster-gc/finalize", json=hook_request("cluster-gc", parent, finalizing=True))
    assert reply.status_code == 400 and "ownerReferences" in reply.get_json()["error"]


@pytest.mark.parametrize("spec,field", [
    ({"region": 5}, "spec.region"),
    ({"region": "us-east-1", "eksClusterName": {"name": "x"}}, "spec.eksClusterName"),
])
def test_finalize_route_rejects_a_mistyped_spec_before_asking_anyone(client, spec, field):
    kind = "AWSManagedControlPlane" if "eksClusterName" in spec else "AWSCluster"
    parent = aws_cluster(kind=kind)
    parent["spec"] = spec
    reply = client.post("/cluster-gc/finalize", json=hook_request("cluster-gc", parent, finalizing=True))
    assert reply.status_code == 400 and field in reply.get_json()["error"]
