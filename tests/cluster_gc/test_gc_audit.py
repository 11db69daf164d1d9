"""``nodewarden gc audit`` against moto in server mode: what is still tagged for a cluster, found two ways.

moto's tagging API lists no Elastic IPs (real AWS's does): the test uses that
gap as the case of a resource the describe calls find and the tagging API
does not. moto keeps terminated instances in the tagging API's answer, as
AWS does for a while: the case of a resource listed there that is gone.
"""
from __future__ import annotations

import json

import pytest

from hooks import cli
from hooks.aws.gc import audit
from hooks.teardown.ownership import cluster_tag_filters
from worlds import cluster_gc as w

pytestmark = pytest.mark.moto

CAPA_TAG = "sigs.k8s.io/cluster-api-provider-aws/cluster/alpha"


@pytest.fixture
def net(aws):
    return w.network(aws("ec2"))


@pytest.fixture
def clients(make_ctx):
    return make_ctx().aws


def _tags(resource_type: str, tags: dict) -> list[dict]:
    return [{"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def _sg(ec2, net, name: str, tags: dict) -> str:
    return ec2.create_security_group(GroupName=name, Description="test", VpcId=net.vpc,
                                     TagSpecifications=_tags("security-group", tags))["GroupId"]


OWNED = {"kubernetes.io/cluster/alpha": "owned"}


def alpha_world(aws, net) -> dict:
    """alpha's resources of every kind the audit describes, each tagged one of the cluster's ways, and others'."""
    ec2 = aws("ec2")
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=1, classic_elbs=1,
                           target_groups=1, security_groups=1, volumes=1, instances=1, network_interfaces=1,
                           elastic_ips=1)
    lb_controller = w.build_cluster(aws, net, "l", w.lb_controller_tags("alpha"), target_groups=1)
    expected = {
        ("elbv2-load-balancer", made.load_balancers[0]), ("classic-load-balancer", made.classic_elbs[0]),
        ("target-group", made.target_groups[0]), ("target-group", lb_controller.target_groups[0]),
        ("security-group", made.security_groups[0]), ("volume", made.volumes[0]),
        ("network-interface", made.network_interfaces[0]), ("elastic-ip", made.elastic_ips[0]),
        ("instance", made.instances[0]),
        ("security-group", _sg(ec2, net, "capa", {**OWNED, CAPA_TAG: "owned"})),
        ("security-group", _sg(ec2, net, "shared", {"kubernetes.io/cluster/alpha": "shared"})),
    }
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16", TagSpecifications=_tags("vpc", OWNED))["Vpc"]["VpcId"]
    # Not alpha's: another cluster's, a cluster whose name starts like alpha's, and untagged ones.
    w.build_cluster(aws, net, "b", w.cluster_tags("beta"), load_balancers=1, target_groups=1, security_groups=1,
                    volumes=1, instances=1, network_interfaces=1)
    w.build_cluster(aws, net, "x", w.cluster_tags("alpha-2"), security_groups=1)
    w.build_cluster(aws, net, "u", [{"Key": "team", "Value": "payments"}], elastic_ips=1)
    terminated = w.build_cluster(aws, net, "t", w.cluster_tags("alpha"), instances=1).instances[0]
    ec2.terminate_instances(InstanceIds=[terminated])
    return {"expected": expected, "vpc": vpc, "terminated": terminated, "made": made}


def test_finds_every_kind_tagged_for_the_cluster_and_says_which_way(aws, net, clients):
    world = alpha_world(aws, net)
    found = {f.key: f for f in audit.find(clients, "alpha", w.REGION)}

    vpc_key = ("ec2:vpc", f"arn:aws:ec2:{w.REGION}:123456789012:vpc/{world['vpc']}")
    terminated = ("instance", world["terminated"])
    assert set(found) == world["expected"] | {vpc_key, terminated}
    both = {audit.TAGGING_API, audit.DESCRIBE}
    eip = next(k for k in world["expected"] if k[0] == "elastic-ip")
    assert {k for k, f in found.items() if f.seen_by == both} == world["expected"] - {eip}
    assert found[eip].seen_by == {audit.DESCRIBE}  # moto's tagging API lists no Elastic IPs
    assert found[vpc_key].seen_by == {audit.TAGGING_API}  # no describe call for VPCs: the tagging API alone
    assert found[terminated].seen_by == {audit.TAGGING_API}  # terminated: only the tagging API still lists it
    instance = next(f for k, f in found.items() if k[0] == "instance" and f.seen_by == both)
    assert instance.state == "running" and instance.tags["nodewarden.io/machine"] == "a-machine-0"
    assert found[eip].state == "unassociated"
    assert found[("volume", world["made"].volumes[0])].state == "available"


def test_judge_counts_what_the_plan_keeps_and_what_is_gone(aws, net, clients):
    world = alpha_world(aws, net)
    found = audit.find(clients, "alpha", w.REGION)
    capa = next(f.key for f in found if f.tags.get(CAPA_TAG))
    report = audit.judge("alpha", w.REGION, found, {capa: "CAPA's own", ("security-group", "sg-gone"): "x"})

    assert [(f.key, reason) for f, reason in report.kept] == [(capa, "CAPA's own")]
    assert [f.key for f in report.gone] == [("instance", world["terminated"])]
    assert {f.key for f in report.leftovers} == {f.key for f in found} - {capa, ("instance", world["terminated"])}
    assert not report.clean
    assert [f.kind for f in report.describe_only] == ["elastic-ip"]
    assert [f.kind for f in report.tagging_only] == ["ec2:vpc"]
    assert audit.judge("alpha", w.REGION, found, {f.key: "kept" for f in found}).clean


def test_reads_every_page_of_the_tagging_api(aws, net, clients):
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), security_groups=110)
    calls = w.Calls().attach(clients)
    found = audit.find(clients, "alpha", w.REGION)
    assert {f.id for f in found} == set(made.security_groups)
    assert all(f.seen_by == {audit.TAGGING_API, audit.DESCRIBE} for f in found)
    assert calls.by_operation["GetResources"] > len(cluster_tag_filters("alpha"))  # a filter's answer took pages


def test_an_empty_region_is_clean(aws, clients):
    report = audit.judge("alpha", w.REGION, audit.find(clients, "alpha", w.REGION))
    assert report.clean and report.to_dict()["leftovers"] == []


# ---------------------------------------------------------------------- CLI


def _plan_file(tmp_path, keep: list[dict], cluster="alpha", region=w.REGION):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"cluster": cluster, "region": region, "delete": [], "keep": keep}))
    return str(path)


def test_cli_audit_exits_1_with_the_leftovers_and_0_once_only_the_kept_remain(aws, net, tmp_path, capsys):
    ec2 = aws("ec2")
    capa = _sg(ec2, net, "capa", {**OWNED, CAPA_TAG: "owned"})
    leftover = _sg(ec2, net, "k8s-elb", OWNED)

    assert cli.main(["gc", "audit", "alpha", "--region", w.REGION]) == 1
    out = capsys.readouterr().out
    assert leftover in out and capa in out and "NOT CLEAN: 2 leftover(s)" in out

    plan = _plan_file(tmp_path, [{"kind": "security-group", "id": capa, "reason": "CAPA's own"}])
    assert cli.main(["gc", "audit", "alpha", "--expect-kept", plan, "-o", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in report["leftovers"]] == [leftover]
    assert [(r["id"], r["reason"]) for r in report["kept"]] == [(capa, "CAPA's own")]
    assert report["region"] == w.REGION and report["clean"] is False

    ec2.delete_security_group(GroupId=leftover)
    assert cli.main(["gc", "audit", "alpha", "--expect-kept", plan]) == 0
    assert "clean: nothing left but what the plan keeps" in capsys.readouterr().out


@pytest.mark.parametrize("content, message", [
    ("not json", "--expect-kept"),
    (json.dumps({"keep": [{"kind": "security-group"}]}), "needs \"keep\""),
    (json.dumps({"cluster": "beta", "keep": []}), "the plan of cluster 'beta'"),
    (json.dumps({"keep": []}), "names no cluster"),
    (json.dumps({"cluster": None, "keep": []}), "names no cluster"),
    (json.dumps({"cluster": "alpha\n", "keep": []}), "the plan of cluster 'alpha\\n'"),
    (json.dumps({"cluster": "alpha", "region": "eu-west-1", "keep": []}), "a plan for eu-west-1"),
])
def test_cli_audit_refuses_a_plan_it_cannot_use(aws, tmp_path, capsys, content, message):
    path = tmp_path / "plan.json"
    path.write_text(content)
    assert cli.main(["gc", "audit", "alpha", "--region", w.REGION, "--expect-kept", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_cli_audit_without_the_tagging_api_gives_no_verdict(aws, net, make_ctx, capsys):
    """A refused tagging API (injected: moto never refuses) leaves half the audit undone: exit 2, not 0."""
    ctx = make_ctx()
    w.Faults().add("GetResources", "AccessDeniedException", times=1).attach(ctx.aws)
    args = cli.build_parser().parse_args(["gc", "audit", "alpha", "--region", w.REGION])
    assert args.func(args, aws=ctx.aws) == 2
    assert "AccessDeniedException" in capsys.readouterr().err
