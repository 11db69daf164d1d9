"""cluster-gc against moto in server mode: a cluster's leftovers go, nothing else does.

Where AWS behaves in a way moto does not (moto raises no
DependencyViolation, no throttling, no refused tagging API, no stale tagging
results), the test injects it through botocore's before-call/after-call
events and says so. Events go to the in-memory stand-in for the Kubernetes API
(worlds/fake_kube.py); the real API server is exercised in tests/e2e.
"""
from __future__ import annotations


import pytest

from hooks.controllers import cluster_gc
from hooks import teardown_names
from worlds import cluster_gc as w

pytestmark = pytest.mark.moto

REMAINING, LAST_ERROR, STALLED_SINCE = teardown_names.REMAINING, teardown_names.LAST_ERROR, teardown_names.STALLED_SINCE


def alpha_everything(aws, net) -> w.Made:
    """alpha's cloud-controller leftovers of every task, classic ELBs and available PV volumes included."""
    return w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=3, classic_elbs=2,
                           target_groups=4, security_groups=3, volumes=2)


def bystanders(aws, net) -> w.Made:
    """What must survive alpha's collection."""
    kept = w.Made()
    kept.extend(w.build_cluster(aws, net, "b", w.cluster_tags("beta"), load_balancers=1, classic_elbs=1,
                                target_groups=1, security_groups=1, volumes=1))
    kept.extend(w.build_cluster(aws, net, "u", [{"Key": "team", "Value": "payments"}], load_balancers=1,
                                target_groups=1, security_groups=1, volumes=1))
    # Tagged for alpha, but not by its cloud controller: no kubernetes.io/service-name ...
    kept.extend(w.build_cluster(aws, net, "m", w.cluster_tags("alpha", service=None), load_balancers=1,
                                target_groups=1))
    # ... EKS's own security group, and CAPA's own (CAPA deletes those itself).
    kept.extend(w.build_cluster(aws, net, "e", w.cluster_tags("alpha"), security_groups=1,
                                sg_tags=w.cluster_tags("alpha", service=None) + [
                                    {"Key": "aws:eks:cluster-name", "Value": "alpha"}]))
    kept.extend(w.build_cluster(aws, net, "c", w.cluster_tags("alpha"), security_groups=1,
                                sg_tags=w.cluster_tags("alpha", service=None) + [
                                    {"Key": "sigs.k8s.io/cluster-api-provider-aws/cluster/alpha", "Value": "owned"}]))
    # The AWS Load Balancer Controller's, not included by default.
    kept.extend(w.build_cluster(aws, net, "l", w.lb_controller_tags("alpha"), load_balancers=1, target_groups=1,
                                security_groups=1))
    return kept


def test_collects_the_clusters_leftovers_and_nothing_else(aws, net, gc_ctx):
    made = alpha_everything(aws, net)
    kept = bystanders(aws, net)
    ctx, kube = gc_ctx()
    run = w.finalize_until_done(ctx, w.aws_cluster(), advance=ctx.clock.advance)

    assert run.finalized, run.responses
    gone = w.existing(aws, made)
    # Volumes are opt-in: the default tasks leave them.
    assert gone == w.Made(volumes=made.volumes)
    assert w.existing(aws, kept) == kept
    assert "ExternalResourcesDeleted" in kube.reasons() and kube.reasons()[-1] == "ExternalResourcesCollected"
    # Progress annotations are cleared when finalizing; status is never touched.
    assert all(r["status"] is None for r in run.responses)
    assert not any(k.startswith("cluster-gc.nodewarden.io/") for k in run.parent["metadata"]["annotations"])


def test_deletes_in_task_order(aws, net, gc_ctx):
    alpha_everything(aws, net)
    ctx, _ = gc_ctx()
    order: list[str] = []
    for service in ("elbv2", "elb", "ec2"):
        ctx.aws.client(service, w.REGION).meta.events.register(
            "before-call", lambda model=None, **_: order.append(model.name) if model.name.startswith("Delete") else None
        )
    assert w.finalize_until_done(ctx, w.aws_cluster()).finalized
    first = {op: order.index(op) for op in order}
    last = {op: len(order) - 1 - order[::-1].index(op) for op in order}
    assert last["DeleteLoadBalancer"] < first["DeleteTargetGroup"] < first["DeleteSecurityGroup"]
    assert last["DeleteTargetGroup"] < first["DeleteSecurityGroup"]


def test_volume_task_deletes_only_available_volumes_and_waits_for_the_rest(aws, net, gc_ctx):
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), security_groups=1, volumes=2)
    root_disk = w.build_cluster(aws, net, "r", w.cluster_tags("alpha"), volumes=1,
                                volume_tags=w.cluster_tags("alpha", service=None))  # no provisioner tag
    ec2 = aws("ec2")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1,
                                 Placement={"AvailabilityZone": net.zones[0]})["Instances"][0]["InstanceId"]
    in_use = made.volumes[1]
    ec2.attach_volume(VolumeId=in_use, InstanceId=instance, Device="/dev/sdf")

    ctx, kube = gc_ctx()
    parent = w.aws_cluster(annotations={teardown_names.TASKS_ANNOTATION: "security-group,volume"})
    run = w.finalize_until_done(ctx, parent, max_calls=4, advance=ctx.clock.advance)
    assert not run.finalized
    assert w.existing(aws, made) == w.Made(volumes=[in_use])
    last = run.responses[-1]["annotations"]
    assert last[REMAINING] == "volume=1" and in_use in last[LAST_ERROR] and "in-use" in last[LAST_ERROR]
    assert run.responses[-1]["resyncAfterSeconds"] >= ctx.settings.error_backoff_seconds

    # CAPA terminated the instance: the volume is free.
    ec2.detach_volume(VolumeId=in_use, InstanceId=instance, Device="/dev/sdf")
    run = w.finalize_until_done(ctx, run.parent, advance=ctx.clock.advance)
    assert run.finalized
    assert w.existing(aws, made).count() == 0
    assert w.existing(aws, root_disk) == root_disk


def test_more_than_a_hundred_tagged_resources_every_page(aws, net, gc_ctx):
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=5, target_groups=5,
                           security_groups=110)
    ctx, _ = gc_ctx({"NODEWARDEN_GC_CALL_BUDGET_SECONDS": "30", "NODEWARDEN_GC_MAX_DELETES_PER_CALL": "500"})
    calls = w.Calls().attach(ctx.aws)
    first = w.finalize_once(ctx, w.aws_cluster())
    # Every page was read: all 120 found and deleted in one call.
    assert calls.by_operation["GetResources"] >= 2
    assert calls.by_operation["DeleteSecurityGroup"] == 110
    assert first["annotations"][REMAINING] == "none"
    assert w.existing(aws, made).count() == 0
    assert w.finalize_once(ctx, w.apply_decorator_response(w.aws_cluster(), first))["finalized"] is True


def test_target_group_in_use_is_retried(aws, net, gc_ctx):
    """AWS: DeleteTargetGroup answers ResourceInUse for a while after its load balancer went (injected)."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=1, target_groups=2)
    ctx, kube = gc_ctx()
    faults = w.Faults().add("DeleteTargetGroup", "ResourceInUse", times=2).attach(ctx.aws)

    first = w.finalize_once(ctx, parent := w.aws_cluster())
    assert first["finalized"] is False
    assert first["annotations"][REMAINING] == "target-group=2"
    assert "ResourceInUse" in first["annotations"][LAST_ERROR]
    # The load balancer went, so this call made progress: resync soon.
    assert first["resyncAfterSeconds"] == ctx.settings.gc_progress_resync_seconds
    assert "ExternalResourceGCRetrying" in kube.reasons()

    run = w.finalize_until_done(ctx, w.apply_decorator_response(parent, first), advance=ctx.clock.advance)
    assert run.finalized and faults.injected[("DeleteTargetGroup", "ResourceInUse")] == 2
    assert w.existing(aws, made).count() == 0


def test_target_group_held_by_a_foreign_listener_blocks_until_freed(aws, net, gc_ctx):
    """moto itself answers ResourceInUse while a listener uses the target group."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), target_groups=1)
    elbv2 = aws("elbv2")
    foreign = elbv2.create_load_balancer(Name="foreign", Subnets=net.subnets, Type="network")["LoadBalancers"][0]
    listener = elbv2.create_listener(LoadBalancerArn=foreign["LoadBalancerArn"], Protocol="TCP", Port=80,
                                     DefaultActions=[{"Type": "forward", "TargetGroupArn": made.target_groups[0]}])
    ctx, _ = gc_ctx()
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=3, advance=ctx.clock.advance)
    assert not run.finalized and "ResourceInUse" in run.parent["metadata"]["annotations"][LAST_ERROR]
    elbv2.delete_listener(ListenerArn=listener["Listeners"][0]["ListenerArn"])
    assert w.finalize_until_done(ctx, run.parent, advance=ctx.clock.advance).finalized
    assert w.existing(aws, made).count() == 0


def test_security_group_dependency_violation_backs_off_then_finishes(aws, net, gc_ctx):
    """AWS: an ELB's ENIs linger after it, so DeleteSecurityGroup answers DependencyViolation (injected; moto never does)."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), security_groups=1)
    ctx, kube = gc_ctx({"NODEWARDEN_ERROR_BACKOFF_SECONDS": "5", "NODEWARDEN_ERROR_BACKOFF_MAX_SECONDS": "60"})
    w.Faults().add("DeleteSecurityGroup", "DependencyViolation", times=4).attach(ctx.aws)

    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=4, advance=ctx.clock.advance)
    resyncs = [r["resyncAfterSeconds"] for r in run.responses]
    assert resyncs == [5, 5, 10, 20]  # doubling with the time stalled
    assert run.parent["metadata"]["annotations"][STALLED_SINCE] == "2026-11-21T12:00:00Z"
    # One Warning for the stall, not one per retry (the message did not change).
    assert kube.reasons().count("ExternalResourceGCRetrying") == 1

    run = w.finalize_until_done(ctx, run.parent, advance=ctx.clock.advance)
    assert run.finalized and w.existing(aws, made).count() == 0


def test_throttling_stops_the_call_and_slows_down(aws, net, gc_ctx):
    """AWS throttles bursts of deletes (injected): the rest of the call is deferred, then resumed."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=6)
    ctx, _ = gc_ctx()
    calls = w.Calls().attach(ctx.aws)
    w.Faults().add("DeleteLoadBalancer", "Throttling", times=1, after=2).attach(ctx.aws)

    first = w.finalize_once(ctx, parent := w.aws_cluster())
    # Two deleted, the third throttled, nothing more tried in this call.
    assert calls.by_operation["DeleteLoadBalancer"] == 3
    assert first["annotations"][REMAINING] == "load-balancer=4"
    assert "Throttling" in first["annotations"][LAST_ERROR]
    assert first["resyncAfterSeconds"] >= ctx.settings.error_backoff_seconds

    ctx.clock.advance(first["resyncAfterSeconds"])
    run = w.finalize_until_done(ctx, w.apply_decorator_response(parent, first), advance=ctx.clock.advance)
    assert run.finalized and w.existing(aws, made).count() == 0


class Crash(BaseException):
    """The hook server process dies mid-call: no response reaches Metacontroller."""


def test_a_crash_half_way_is_finished_by_the_next_call(aws, net, gc_ctx):
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=3, target_groups=3,
                           security_groups=3)
    ctx, _ = gc_ctx()
    deletes = []

    def die_on_the_fourth_delete(model=None, **_):
        if model.name.startswith("Delete"):
            deletes.append(model.name)
            if len(deletes) == 4:
                raise Crash()

    for service in ("elbv2", "ec2"):
        ctx.aws.client(service, w.REGION).meta.events.register("before-call", die_on_the_fourth_delete)
    with pytest.raises(Crash):
        w.finalize_once(ctx, w.aws_cluster())
    assert 0 < w.existing(aws, made).count() < made.count()

    # A new process: fresh context, the parent as Metacontroller still has it (no progress recorded).
    fresh, _ = gc_ctx()
    run = w.finalize_until_done(fresh, w.aws_cluster())
    assert run.finalized and w.existing(aws, made).count() == 0


def test_tagging_api_denied_falls_back_to_listing(aws, net, gc_ctx):
    """An IAM policy without tag:GetResources (injected AccessDeniedException): list and read tags in chunks of 20."""
    made = alpha_everything(aws, net)
    extra = w.build_cluster(aws, net, "x", w.cluster_tags("alpha"), load_balancers=20, target_groups=3)
    kept = bystanders(aws, net)
    ctx, _ = gc_ctx({"NODEWARDEN_GC_MAX_DELETES_PER_CALL": "500", "NODEWARDEN_GC_CALL_BUDGET_SECONDS": "30"})
    faults = w.Faults().add("GetResources", "AccessDeniedException", times=float("inf")).attach(ctx.aws)
    calls = w.Calls().attach(ctx.aws)

    observed = cluster_gc.gather(w.parse_finalize(w.aws_cluster(), verified=True), ctx, ctx.now())
    assert observed["discovery"]["method"] == "listing"
    assert "AccessDeniedException" in observed["discovery"]["fallback"]
    # 27 ELBv2 load balancers (ours and others): tags read 20 at a time.
    assert calls.by_operation["DescribeTags"] >= 4

    run = w.finalize_until_done(ctx, w.aws_cluster())
    assert run.finalized
    assert w.existing(aws, made) == w.Made(volumes=made.volumes)
    assert w.existing(aws, extra).count() == 0
    assert w.existing(aws, kept) == kept
    # Every tagging call was refused (and counted); the work was done by listing.
    assert calls.by_operation["GetResources"] == faults.injected[("GetResources", "AccessDeniedException")] > 0


def test_tagging_api_configured_off(aws, net, gc_ctx):
    made = alpha_everything(aws, net)
    ctx, _ = gc_ctx({"NODEWARDEN_GC_TAGGING_API": "false",
                     "NODEWARDEN_GC_INCLUDE_LB_CONTROLLER": "false"})
    calls = w.Calls().attach(ctx.aws)
    assert w.finalize_until_done(ctx, w.aws_cluster()).finalized
    assert calls.by_operation["GetResources"] == 0
    assert w.existing(aws, made) == w.Made(volumes=made.volumes)


def test_stale_tagging_results_do_not_hold_the_cluster(aws, net, gc_ctx):
    """The tagging API may list resources deleted moments ago (injected into its answer): they do not count."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=1, security_groups=1)
    ctx, _ = gc_ctx()
    stale = [
        "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/gone/0000000000000000",
        "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/gone/0000000000000000",
        "arn:aws:ec2:us-east-1:123456789012:security-group/sg-00000000000000000",
    ]

    def add_stale(parsed=None, model=None, **_):
        if model.name == "GetResources" and isinstance(parsed, dict):
            parsed.setdefault("ResourceTagMappingList", []).extend(
                {"ResourceARN": arn, "Tags": [{"Key": "kubernetes.io/cluster/alpha", "Value": "owned"},
                                              {"Key": "kubernetes.io/service-name", "Value": "default/web"}]}
                for arn in stale
            )

    ctx.aws.client("resourcegroupstaggingapi", w.REGION).meta.events.register("after-call", add_stale)
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=5)
    assert run.finalized and len(run.responses) <= 3
    assert w.existing(aws, made).count() == 0


def test_a_load_balancer_untagged_by_its_user_is_not_deleted_on_the_tagging_apis_stale_word(aws, net, gc_ctx):
    """A user takes the cluster's tag off a load balancer, a target group and a classic ELB to keep them; the
    tagging API still lists them with the old tags for a while (injected into its answer). Their tags as the
    load balancing API has them now decide: nothing is deleted."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=1, target_groups=1,
                           classic_elbs=1)
    elbv2, elb = aws("elbv2"), aws("elb")
    elbv2.remove_tags(ResourceArns=made.load_balancers + made.target_groups, TagKeys=["kubernetes.io/cluster/alpha"])
    elb.remove_tags(LoadBalancerNames=made.classic_elbs, Tags=[{"Key": "kubernetes.io/cluster/alpha"}])
    arns = made.load_balancers + made.target_groups + [
        f"arn:aws:elasticloadbalancing:{w.REGION}:123456789012:loadbalancer/{name}" for name in made.classic_elbs]
    ctx, _ = gc_ctx()

    def stale(parsed=None, model=None, **_):
        if model.name == "GetResources" and isinstance(parsed, dict):
            parsed.setdefault("ResourceTagMappingList", []).extend(
                {"ResourceARN": arn, "Tags": [{"Key": "kubernetes.io/cluster/alpha", "Value": "owned"},
                                              {"Key": "kubernetes.io/service-name", "Value": "default/web"}]}
                for arn in arns)

    ctx.aws.client("resourcegroupstaggingapi", w.REGION).meta.events.register("after-call", stale)
    calls = w.Calls().attach(ctx.aws)
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=5, advance=ctx.clock.advance)
    assert run.finalized
    assert calls.by_operation["DeleteLoadBalancer"] == calls.by_operation["DeleteTargetGroup"] == 0
    assert w.existing(aws, made) == made


def test_lb_controller_resources_when_configured(aws, net, gc_ctx):
    lbc = w.build_cluster(aws, net, "l", w.lb_controller_tags("alpha"), load_balancers=2, target_groups=2,
                          security_groups=1)
    other = w.build_cluster(aws, net, "o", w.lb_controller_tags("gamma"), load_balancers=1, security_groups=1)
    for tagging_api in ("true", "false"):
        ctx, _ = gc_ctx({"NODEWARDEN_GC_INCLUDE_LB_CONTROLLER": "true", "NODEWARDEN_GC_TAGGING_API": tagging_api})
        assert w.finalize_until_done(ctx, w.aws_cluster()).finalized
    assert w.existing(aws, lbc).count() == 0
    assert w.existing(aws, other) == other


def test_opted_out_cluster_is_finalized_at_once_and_keeps_everything(aws, net, gc_ctx):
    made = alpha_everything(aws, net)
    ctx, kube = gc_ctx()
    calls = w.Calls().attach(ctx.aws)
    response = w.finalize_once(ctx, w.aws_cluster(annotations={teardown_names.GC_ANNOTATION: "false"}))
    assert response["finalized"] is True
    assert calls.total == 0 and w.existing(aws, made) == made
    assert kube.reasons() == ["ExternalResourceGCSkipped"]


def test_managed_control_plane_collects_by_eks_cluster_name(aws, net, gc_ctx):
    eks = w.build_cluster(aws, net, "k", w.cluster_tags("team-a_prod-cp"), load_balancers=1, security_groups=1)
    capi_named = w.build_cluster(aws, net, "p", w.cluster_tags("alpha"), load_balancers=1)
    ctx, _ = gc_ctx()
    parent = w.aws_cluster("prod-cp", kind="AWSManagedControlPlane")
    parent["metadata"]["namespace"] = "team-a"
    assert w.finalize_until_done(ctx, parent).finalized
    assert w.existing(aws, eks).count() == 0
    assert w.existing(aws, capi_named) == capi_named


def test_discovery_failure_is_recorded_not_raised(aws, net, gc_ctx):
    """Describe calls refused (injected): held with the error, backoff, no exception."""
    w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=1)
    ctx, kube = gc_ctx()
    w.Faults().add("DescribeTags", "AccessDenied", times=1).attach(ctx.aws)
    response = w.finalize_once(ctx, w.aws_cluster())
    assert response["finalized"] is False
    assert response["annotations"][LAST_ERROR].startswith("discovery failed: AccessDenied")
    assert response["resyncAfterSeconds"] == ctx.settings.error_backoff_seconds
    assert kube.reasons() == ["ExternalResourceGCRetrying"]


def test_each_call_deletes_at_most_its_share_and_the_rest_waits_for_the_next(aws, net, gc_ctx):
    """The per-call bound that keeps every call short (its wall time is measured in bench/cluster_gc.py)."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=50, target_groups=50,
                           security_groups=50)
    ctx, _ = gc_ctx({"NODEWARDEN_GC_MAX_DELETES_PER_CALL": "20"})
    calls = w.Calls().attach(ctx.aws)
    deletes_per_call, before = [], 0
    parent = w.aws_cluster()
    for _ in range(40):
        run = w.finalize_until_done(ctx, parent, max_calls=1)
        parent = run.parent
        total = sum(n for op, n in calls.by_operation.items() if op.startswith("Delete"))
        deletes_per_call.append(total - before)
        before = total
        if run.finalized:
            break
    assert run.finalized and w.existing(aws, made).count() == 0
    assert max(deletes_per_call) <= 20, deletes_per_call
    assert len(deletes_per_call) >= 150 // 20, "the work was spread over calls"


# ------------------------------------------------- trust: only the API server's word counts


def _prod_and_alpha(aws, net):
    return (w.build_cluster(aws, net, "p", w.cluster_tags("prod"), load_balancers=1, target_groups=1,
                            security_groups=1),
            w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=1, target_groups=1))


def test_a_forged_finalize_for_a_cluster_the_api_server_does_not_have_deletes_nothing(aws, net, gc_ctx):
    prod, alpha = _prod_and_alpha(aws, net)
    ctx, kube = gc_ctx({"NODEWARDEN_CLUSTER_NAME": "mgmt"})
    forged = w.aws_cluster("prod", cluster="prod")  # a deleting AWSCluster nobody created
    for _ in range(3):
        response = cluster_gc.finalize(w.parse_finalize(forged), ctx=ctx)
        assert response["finalized"] is False
    assert "does not exist on the API server" in response["annotations"][LAST_ERROR]
    assert w.existing(aws, prod) == prod and w.existing(aws, alpha) == alpha
    assert kube.reasons() == []  # no Events about an object that does not exist


def test_a_forged_deletion_of_a_live_cluster_deletes_nothing(aws, net, gc_ctx):
    prod, _ = _prod_and_alpha(aws, net)
    ctx, kube = gc_ctx()
    kube.add_object(w.aws_cluster("prod", cluster="prod", deleting=False))  # real, and not being deleted
    response = cluster_gc.finalize(w.parse_finalize(w.aws_cluster("prod", cluster="prod")), ctx=ctx)
    assert response["finalized"] is False and "is not being deleted" in response["annotations"][LAST_ERROR]
    assert w.existing(aws, prod) == prod


def test_the_scope_comes_from_the_api_server_not_from_the_body(aws, net, gc_ctx):
    """A real deleting cluster alpha, and a body that relabels it prod: only alpha's leftovers go."""
    prod, alpha = _prod_and_alpha(aws, net)
    ctx, kube = gc_ctx()
    kube.add_object(w.aws_cluster("alpha", cluster="alpha"))
    body = w.aws_cluster("alpha", cluster="prod")
    for _ in range(5):
        response = cluster_gc.finalize(w.parse_finalize(body), ctx=ctx)
        if response["finalized"]:
            break
    assert response["finalized"] is True
    assert w.existing(aws, alpha).count() == 0
    assert w.existing(aws, prod) == prod


def test_a_uid_other_than_the_bodys_or_a_missing_finalizer_deletes_nothing(aws, net, gc_ctx):
    _, alpha = _prod_and_alpha(aws, net)
    ctx, kube = gc_ctx()
    replaced = w.aws_cluster("alpha")
    replaced["metadata"]["uid"] = "uid-of-a-newer-alpha"
    kube.add_object(replaced)
    response = cluster_gc.finalize(w.parse_finalize(w.aws_cluster("alpha")), ctx=ctx)
    assert "uid-of-a-newer-alpha" in response["annotations"][LAST_ERROR]
    unmanaged = w.aws_cluster("alpha")
    unmanaged["metadata"]["finalizers"] = ["someone-else"]
    kube.add_object(unmanaged)
    response = cluster_gc.finalize(w.parse_finalize(w.aws_cluster("alpha")), ctx=ctx)
    assert "does not carry the finalizer" in response["annotations"][LAST_ERROR]
    assert w.existing(aws, alpha) == alpha


def test_no_reachable_api_server_means_no_delete(aws, net, gc_ctx, make_ctx):
    _, alpha = _prod_and_alpha(aws, net)
    ctx = make_ctx(kube=w.FakeKube(unavailable=True))
    response = cluster_gc.finalize(w.parse_finalize(w.aws_cluster("alpha")), ctx=ctx)
    assert response["finalized"] is False and response["resyncAfterSeconds"] >= 5
    assert "cannot read AWSCluster" in response["annotations"][LAST_ERROR]
    assert w.existing(aws, alpha) == alpha


def test_a_cluster_being_moved_by_clusterctl_keeps_everything(aws, net, gc_ctx):
    made = alpha_everything(aws, net)
    ctx, kube = gc_ctx()
    calls = w.Calls().attach(ctx.aws)
    moving = w.aws_cluster(annotations={teardown_names.DELETE_FOR_MOVE: ""})
    response = w.finalize_once(ctx, moving)
    assert response["finalized"] is True
    assert calls.total == 0 and w.existing(aws, made) == made
    assert kube.reasons() == ["ExternalResourceGCSkipped"]


def test_an_empty_tagging_answer_is_not_finalized_while_the_listing_finds_resources(aws, net, gc_ctx):
    """The tagging API lags behind new resources (injected: its answer is emptied); the listing must agree."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=1, target_groups=1,
                           security_groups=1)
    ctx, _ = gc_ctx()

    def lagging(parsed=None, model=None, **_):
        if model.name == "GetResources" and isinstance(parsed, dict):
            parsed["ResourceTagMappingList"] = []

    ctx.aws.client("resourcegroupstaggingapi", w.REGION).meta.events.register("after-call", lagging)
    first = w.finalize_once(ctx, w.aws_cluster())
    assert first["finalized"] is False
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=6)
    assert run.finalized and w.existing(aws, made).count() == 0


@pytest.mark.parametrize("annotations", [
    {teardown_names.DELETE_FOR_MOVE: ""},
    {teardown_names.GC_ANNOTATION: "false"},
    {teardown_names.GC_ANNOTATION: "maybe"},
    {teardown_names.TASKS_ANNOTATION: "nat-gateway"},
])
def test_a_forged_body_gets_no_event_and_no_finalized_whatever_it_claims(aws, net, gc_ctx, annotations):
    """A body that skips or blocks (a move, an opt-out, a bad value) is still checked with the API server first."""
    prod, _ = _prod_and_alpha(aws, net)
    ctx, kube = gc_ctx()
    calls = w.Calls().attach(ctx.aws)
    forged = w.aws_cluster("prod", cluster="prod", annotations=annotations)  # the API server has no such object
    response = cluster_gc.finalize(w.parse_finalize(forged), ctx=ctx)
    assert response["finalized"] is False
    assert "does not exist on the API server" in response["annotations"][LAST_ERROR]
    assert kube.reasons() == [] and calls.total == 0
    assert w.existing(aws, prod) == prod


def test_a_move_is_read_from_the_api_server_not_from_a_stale_body(aws, net, gc_ctx):
    """clusterctl annotated the object, then deleted it; the body Metacontroller sent predates the annotation."""
    made = alpha_everything(aws, net)
    ctx, kube = gc_ctx()
    kube.add_object(w.aws_cluster(annotations={teardown_names.DELETE_FOR_MOVE: ""}))
    response = cluster_gc.finalize(w.parse_finalize(w.aws_cluster()), ctx=ctx)
    assert response["finalized"] is True
    assert w.existing(aws, made) == made
    assert kube.reasons() == ["ExternalResourceGCSkipped"]


def _mistyped(change) -> dict:
    parent = w.aws_cluster()
    change(parent)
    return parent


def _owner(ref) -> object:
    def change(parent):
        del parent["metadata"]["labels"]
        parent["metadata"]["ownerReferences"] = ref
    return change


@pytest.mark.parametrize("fresh_parent", [
    _mistyped(lambda p: p["spec"].update(region=5)),
    _mistyped(lambda p: p["spec"].update(region={"name": "us-east-1"})),
    _mistyped(lambda p: p["spec"].update(region="us-east-1.attacker.example")),
    _mistyped(_owner("not-a-list")),
    _mistyped(_owner([5])),
    _mistyped(_owner([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": 7}])),
    _mistyped(_owner([{"apiVersion": ["cluster.x-k8s.io/v1beta2"], "kind": "Cluster", "name": "alpha"}])),
    dict(w.aws_cluster(kind="AWSManagedControlPlane"), spec={"region": w.REGION, "eksClusterName": ["alpha"]}),
], ids=["region-number", "region-object", "region-not-a-region", "owners-not-a-list", "owner-not-an-object",
        "owner-name-number", "owner-apiversion-list", "eks-cluster-name-list"])
def test_a_mistyped_field_of_the_api_servers_copy_blocks_and_says_which(aws, net, gc_ctx, fresh_parent):
    """The CRD's schema should refuse these; if it does not, the deletion is held with a Warning, never a 500."""
    made = alpha_everything(aws, net)
    ctx, kube = gc_ctx()
    kube.add_object(fresh_parent)
    calls = w.Calls().attach(ctx.aws)
    body = w.aws_cluster(kind=fresh_parent["kind"])  # well-formed: only the API server's copy is mistyped
    response = cluster_gc.finalize(w.parse_finalize(body), ctx=ctx)
    assert response["finalized"] is False and response["resyncAfterSeconds"] >= ctx.settings.error_backoff_seconds
    message = response["annotations"][LAST_ERROR]
    assert any(field in message for field in ("spec.region", "spec.eksClusterName", "ownerReferences")), message
    assert kube.reasons() == ["ExternalResourceGCBlocked"]
    assert calls.total == 0 and w.existing(aws, made) == made


def test_the_finalizer_checked_is_the_configured_controllers(aws, net, gc_ctx):
    _, alpha = _prod_and_alpha(aws, net)
    ctx, kube = gc_ctx({"NODEWARDEN_GC_CONTROLLER_NAME": "gc-b"})
    kube.add_object(w.aws_cluster())  # carries metacontroller.io/decoratorcontroller-cluster-gc only
    response = cluster_gc.finalize(w.parse_finalize(w.aws_cluster()), ctx=ctx)
    assert "does not carry the finalizer metacontroller.io/decoratorcontroller-gc-b" in \
        response["annotations"][LAST_ERROR]
    assert w.existing(aws, alpha) == alpha

    ours = w.aws_cluster()
    ours["metadata"]["finalizers"] = ["metacontroller.io/decoratorcontroller-gc-b"]
    assert w.finalize_until_done(ctx, ours).finalized
    assert w.existing(aws, alpha).count() == 0


def test_finalizers_that_are_not_a_list_prove_nothing(aws, net, gc_ctx):
    """A string holding the finalizer's name is not a list containing it."""
    _, alpha = _prod_and_alpha(aws, net)
    ctx, kube = gc_ctx()
    odd = w.aws_cluster()
    odd["metadata"]["finalizers"] = "x-metacontroller.io/decoratorcontroller-cluster-gc-x"
    kube.add_object(odd)
    response = cluster_gc.finalize(w.parse_finalize(w.aws_cluster()), ctx=ctx)
    assert response["finalized"] is False and "does not carry the finalizer" in response["annotations"][LAST_ERROR]
    assert w.existing(aws, alpha) == alpha


def test_a_tagging_answer_with_only_bystanders_is_confirmed_by_the_listing(aws, net, gc_ctx):
    """The tagging API lists CAPA's own security group but not yet a load balancer made moments ago (injected:
    its answer keeps only the security groups). Nothing it lists is ours to delete, which is not proof that
    nothing is left: the listing in the same call finds the load balancer."""
    capa_sg = w.build_cluster(aws, net, "c", w.cluster_tags("alpha"), security_groups=1,
                              sg_tags=w.cluster_tags("alpha", service=None) + [
                                  {"Key": "sigs.k8s.io/cluster-api-provider-aws/cluster/alpha", "Value": "owned"}])
    new_lb = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=1)
    ctx, _ = gc_ctx()

    def lagging(parsed=None, model=None, **_):
        if model.name == "GetResources" and isinstance(parsed, dict):
            parsed["ResourceTagMappingList"] = [m for m in parsed.get("ResourceTagMappingList", [])
                                                if ":security-group/" in m["ResourceARN"]]

    ctx.aws.client("resourcegroupstaggingapi", w.REGION).meta.events.register("after-call", lagging)
    observed = cluster_gc.gather(w.parse_finalize(w.aws_cluster(), verified=True), ctx, ctx.now())
    assert observed["discovery"]["method"] == "listing"
    assert [r["id"] for r in observed["discovery"]["resources"] if r["kind"] == "elbv2-load-balancer"] == \
        new_lb.load_balancers
    first = w.finalize_once(ctx, w.aws_cluster())
    assert first["finalized"] is False
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=6)
    assert run.finalized
    assert w.existing(aws, new_lb).count() == 0 and w.existing(aws, capa_sg) == capa_sg
