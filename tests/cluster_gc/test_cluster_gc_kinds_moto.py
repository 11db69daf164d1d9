"""cluster-gc's instances, ENIs and Elastic IPs against moto in server mode, and discover_all.

moto deletes an attached ENI and releases an associated Elastic IP when
asked (AWS refuses both), so every "kept" here is cluster-gc's own doing.
"""
from __future__ import annotations


import pytest

from hooks import teardown_names
from hooks.aws.gc import discovery
from hooks.teardown.plan import plan_of
from hooks.teardown.scope import COLLECT, Scope
from hooks.teardown.tasks import DEFAULT_TASKS, KIND_TASK, TASK_ORDER
from worlds import cluster_gc as w

pytestmark = pytest.mark.moto

REMAINING, LAST_ERROR = teardown_names.REMAINING, teardown_names.LAST_ERROR
CAPA_TAGS = [{"Key": "kubernetes.io/cluster/alpha", "Value": "owned"},
             {"Key": "sigs.k8s.io/cluster-api-provider-aws/cluster/alpha", "Value": "owned"},
             {"Key": "sigs.k8s.io/cluster-api-provider-aws/role", "Value": "common"}]


def bystander_instance(aws, net) -> str:
    """An instance no controller of alpha made: somewhere to attach ENIs and associate Elastic IPs."""
    return w.build_cluster(aws, net, "z", [{"Key": "team", "Value": "payments"}], instances=1,
                           instance_tags=[{"Key": "team", "Value": "payments"}]).instances[0]


def kept_kinds(aws, net) -> w.Made:
    """Tagged for alpha, or like alpha's, but not for cluster-gc to delete."""
    kept = w.Made()
    # CAPA's own Elastic IP (its NAT gateway's): CAPA releases it.
    kept.extend(w.build_cluster(aws, net, "c", w.cluster_tags("alpha"), elastic_ips=1, eip_tags=CAPA_TAGS))
    # Another cluster's ENI and Elastic IP.
    kept.extend(w.build_cluster(aws, net, "b", w.cluster_tags("beta"), network_interfaces=1, elastic_ips=1))
    # An instance tagged for alpha without a Machine's tags (CAPA's, or a user's).
    kept.extend(w.build_cluster(aws, net, "u", w.cluster_tags("alpha"), instances=1,
                                instance_tags=w.cluster_tags("alpha", service=None)))
    # An ENI tagged for alpha, but not by the VPC CNI.
    kept.extend(w.build_cluster(aws, net, "n", w.cluster_tags("alpha"), network_interfaces=1,
                                eni_tags=w.cluster_tags("alpha", service=None)))
    return kept


def test_one_of_each_new_kind_goes_and_the_rest_stays(aws, net, gc_ctx):
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), instances=1, network_interfaces=1,
                           elastic_ips=1, load_balancers=1, security_groups=1)
    kept = kept_kinds(aws, net)
    ctx, kube = gc_ctx()
    run = w.finalize_until_done(ctx, w.aws_cluster(), advance=ctx.clock.advance)
    assert run.finalized, run.responses
    assert w.existing(aws, made).count() == 0
    assert w.existing(aws, kept) == kept
    assert kube.reasons()[-1] == "ExternalResourcesCollected"


def test_deletes_in_the_order_of_the_tasks(aws, net, gc_ctx):
    """Found by listing: moto's tagging API does not know Elastic IPs (AWS's does), so through it they would
    only be found once nothing else it lists is left."""
    w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), instances=2, network_interfaces=2, elastic_ips=2,
                    load_balancers=1, target_groups=1, security_groups=1)
    ctx, _ = gc_ctx({"NODEWARDEN_GC_TAGGING_API": "false"})
    order: list[str] = []
    for service in ("elbv2", "ec2"):
        ctx.aws.client(service, w.REGION).meta.events.register(
            "before-call", lambda model=None, **_: order.append(model.name)
            if model.name.startswith(("Delete", "Terminate", "Release")) else None)
    assert w.finalize_until_done(ctx, w.aws_cluster(), advance=ctx.clock.advance).finalized
    stages = ["TerminateInstances", "DeleteLoadBalancer", "DeleteTargetGroup", "DeleteNetworkInterface",
              "ReleaseAddress", "DeleteSecurityGroup"]
    firsts = [order.index(op) for op in stages]
    lasts = [len(order) - 1 - order[::-1].index(op) for op in stages]
    assert all(lasts[i] < firsts[i + 1] for i in range(len(stages) - 1)), " ".join(order)


def test_an_in_use_eni_and_an_associated_elastic_ip_are_waited_for(aws, net, gc_ctx):
    """Found by listing (moto's tagging API does not know Elastic IPs)."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), network_interfaces=2, elastic_ips=2)
    attached_eni, associated_eip = made.network_interfaces[1], made.elastic_ips[1]
    ec2 = aws("ec2")
    holder = bystander_instance(aws, net)
    attachment = ec2.attach_network_interface(NetworkInterfaceId=attached_eni, InstanceId=holder,
                                              DeviceIndex=1)["AttachmentId"]
    association = ec2.associate_address(AllocationId=associated_eip, InstanceId=holder)["AssociationId"]

    ctx, _ = gc_ctx({"NODEWARDEN_GC_TAGGING_API": "false"})
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=4, advance=ctx.clock.advance)
    assert not run.finalized
    # The ENI stage waits for the attached one, and holds the Elastic IPs behind it.
    assert w.existing(aws, made) == w.Made(network_interfaces=[attached_eni], elastic_ips=made.elastic_ips)
    annotations = run.parent["metadata"]["annotations"]
    assert annotations[REMAINING] == "network-interface=1,elastic-ip=2"
    assert attached_eni in annotations[LAST_ERROR] and "in-use" in annotations[LAST_ERROR]

    ec2.detach_network_interface(AttachmentId=attachment)
    run = w.finalize_until_done(ctx, run.parent, max_calls=4, advance=ctx.clock.advance)
    assert not run.finalized
    assert w.existing(aws, made) == w.Made(elastic_ips=[associated_eip])
    assert "associated" in run.parent["metadata"]["annotations"][LAST_ERROR]

    ec2.disassociate_address(AssociationId=association)
    run = w.finalize_until_done(ctx, run.parent, advance=ctx.clock.advance)
    assert run.finalized and w.existing(aws, made).count() == 0


def test_an_eni_attached_after_discovery_is_not_deleted(aws, net, gc_ctx):
    """The ENI is attached between discovery and its delete (injected right after discovery's read): the
    re-read before the delete sees it in use, and nothing is deleted."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), network_interfaces=1)
    holder = bystander_instance(aws, net)
    ctx, _ = gc_ctx()
    reads = []

    def attach_after_first_read(model=None, **_):
        if model.name == "DescribeNetworkInterfaces":
            reads.append(1)
            if len(reads) == 1:
                aws("ec2").attach_network_interface(NetworkInterfaceId=made.network_interfaces[0],
                                                    InstanceId=holder, DeviceIndex=1)

    ctx.aws.client("ec2", w.REGION).meta.events.register("after-call", attach_after_first_read)
    calls = w.Calls().attach(ctx.aws)
    response = w.finalize_once(ctx, w.aws_cluster())
    assert calls.by_operation["DeleteNetworkInterface"] == 0
    assert w.existing(aws, made) == made
    assert response["finalized"] is False
    assert "is kept now" in response["annotations"][LAST_ERROR] and "in use" in response["annotations"][LAST_ERROR]


def test_an_instance_that_lost_its_machine_tags_is_not_terminated(aws, net, gc_ctx):
    """Someone removes the Machine's tags between discovery and the terminate: the re-read refuses it."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), instances=1)
    ctx, _ = gc_ctx()
    reads = []

    def untag_after_first_read(model=None, **_):
        if model.name == "DescribeInstances":
            reads.append(1)
            if len(reads) == 1:
                aws("ec2").delete_tags(Resources=made.instances, Tags=[{"Key": "nodewarden.io/machine-uid"}])

    ctx.aws.client("ec2", w.REGION).meta.events.register("after-call", untag_after_first_read)
    calls = w.Calls().attach(ctx.aws)
    response = w.finalize_once(ctx, w.aws_cluster())
    assert calls.by_operation["TerminateInstances"] == 0
    assert w.existing(aws, made) == made
    assert "not made by one of its controllers" in response["annotations"][LAST_ERROR]
    # Without the tag it is not the Machine's: the next calls leave it and let the cluster go.
    run = w.finalize_until_done(ctx, w.apply_decorator_response(w.aws_cluster(), response))
    assert run.finalized and w.existing(aws, made) == made


def test_a_task_turned_off_keeps_its_kind(aws, net, gc_ctx):
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), instances=1, network_interfaces=1,
                           elastic_ips=1, load_balancers=1)
    ctx, _ = gc_ctx()
    parent = w.aws_cluster(annotations={teardown_names.TASKS_ANNOTATION: "load-balancer,elastic-ip"})
    run = w.finalize_until_done(ctx, parent, advance=ctx.clock.advance)
    assert run.finalized
    assert w.existing(aws, made) == w.Made(instances=made.instances, network_interfaces=made.network_interfaces)


def test_finalized_only_once_discovery_finds_nothing_left(aws, net, gc_ctx):
    """The call that terminates the instance answers remaining none; only the next one, which finds the
    instance terminated, finalizes."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), instances=1)
    ctx, _ = gc_ctx()
    first = w.finalize_once(ctx, parent := w.aws_cluster())
    assert first["finalized"] is False and first["annotations"][REMAINING] == "none"
    assert w.existing(aws, made).count() == 0
    second = w.finalize_once(ctx, w.apply_decorator_response(parent, first))
    assert second["finalized"] is True


def test_a_terminating_instance_holds_the_later_tasks(aws, net, gc_ctx):
    """AWS keeps an instance shutting-down for a while (moto terminates at once: its state is injected into
    DescribeInstances' answer): nothing after the instance task is deleted meanwhile."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), instances=1, load_balancers=1)
    ctx, _ = gc_ctx()
    shutting_down = {"on": True}

    def still_shutting_down(parsed=None, model=None, **_):
        if model.name == "DescribeInstances" and shutting_down["on"] and isinstance(parsed, dict):
            for reservation in parsed.get("Reservations", []):
                for instance in reservation.get("Instances", []):
                    if instance["InstanceId"] in made.instances:
                        instance["State"] = {"Code": 32, "Name": "shutting-down"}

    ctx.aws.client("ec2", w.REGION).meta.events.register("after-call", still_shutting_down)
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=3, advance=ctx.clock.advance)
    assert not run.finalized
    assert w.existing(aws, made) == w.Made(load_balancers=made.load_balancers, instances=made.instances)
    assert "shutting-down" in run.parent["metadata"]["annotations"][LAST_ERROR]
    shutting_down["on"] = False
    aws("ec2").terminate_instances(InstanceIds=made.instances)
    run = w.finalize_until_done(ctx, run.parent, advance=ctx.clock.advance)
    assert run.finalized and w.existing(aws, made).count() == 0


def test_the_listing_finds_the_new_kinds_when_the_tagging_api_is_off(aws, net, gc_ctx):
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), instances=1, network_interfaces=1,
                           elastic_ips=1)
    kept = kept_kinds(aws, net)
    ctx, _ = gc_ctx({"NODEWARDEN_GC_TAGGING_API": "false"})
    calls = w.Calls().attach(ctx.aws)
    assert w.finalize_until_done(ctx, w.aws_cluster(), advance=ctx.clock.advance).finalized
    assert calls.by_operation["GetResources"] == 0
    assert w.existing(aws, made).count() == 0 and w.existing(aws, kept) == kept


# ----------------------------------------------------------- discover_all and the plan


def _ids(resources) -> set[str]:
    return {r["id"] for r in resources}


@pytest.mark.parametrize("tagging_api", ["works", "refused"])
def test_discover_all_finds_everything_tagged_for_the_cluster_and_the_plan_says_why_each_stays(
        aws, net, gc_ctx, tagging_api):
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), instances=1, network_interfaces=1,
                           elastic_ips=1, load_balancers=1, security_groups=1, volumes=1)
    kept = kept_kinds(aws, net)
    lb_controllers = w.build_cluster(aws, net, "l", w.lb_controller_tags("alpha"), target_groups=1)
    untagged = w.build_cluster(aws, net, "x", [{"Key": "team", "Value": "payments"}], security_groups=1,
                               network_interfaces=1, eni_tags=[{"Key": "team", "Value": "payments"}])
    ctx, _ = gc_ctx()
    if tagging_api == "refused":
        w.Faults().add("GetResources", "AccessDeniedException", times=float("inf")).attach(ctx.aws)

    found = discovery.discover_all(ctx.aws, "alpha", w.REGION, include_lb_controller=False)
    assert found["method"] == ("listing" if tagging_api == "refused" else "tagging-api+listing")
    ids = _ids(found["resources"])
    for ident in (made.instances + made.network_interfaces + made.elastic_ips + made.load_balancers
                  + made.security_groups + made.volumes + lb_controllers.target_groups):
        assert ident in ids
    assert not ids & set(untagged.security_groups + untagged.network_interfaces)

    scope = Scope(COLLECT, "", "alpha", w.REGION, DEFAULT_TASKS)
    plan = plan_of(scope, found["resources"], ctx.now())
    assert _ids(plan.delete) == set(made.instances + made.network_interfaces + made.elastic_ips
                                    + made.load_balancers + made.security_groups)
    reasons = {r["id"]: reason for r, reason in plan.keep}
    assert reasons[made.volumes[0]] == teardown_names.KEEP_TASK_OFF
    assert reasons[lb_controllers.target_groups[0]] == teardown_names.KEEP_LB_CONTROLLER_OFF
    capa_eip = kept.elastic_ips[0]
    assert reasons[capa_eip] == teardown_names.KEEP_CAPA
    assert reasons[kept.instances[0]] == teardown_names.KEEP_NOT_MADE_BY_CONTROLLER
    assert reasons[kept.network_interfaces[1]] == teardown_names.KEEP_NOT_MADE_BY_CONTROLLER  # not the CNI's
    # beta's ENI and Elastic IP carry none of alpha's tags.
    assert kept.elastic_ips[1] not in ids and kept.network_interfaces[0] not in ids
    # Deleted in task order.
    order = [TASK_ORDER.index(KIND_TASK[r["kind"]]) for r in plan.delete]
    assert order == sorted(order)


def test_waiting_for_a_resource_held_by_something_not_collected_ends_at_the_wait_limit(aws, net, gc_ctx):
    """An ENI attached to, and an Elastic IP associated with, an instance no controller of alpha made: no
    delete of cluster-gc's frees them. The deletion waits for them (and holds the security group behind
    them) up to the wait limit, then deletes the rest, lets the cluster go and names what it left."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), network_interfaces=1, elastic_ips=1,
                           security_groups=1)
    ec2 = aws("ec2")
    holder = bystander_instance(aws, net)
    ec2.attach_network_interface(NetworkInterfaceId=made.network_interfaces[0], InstanceId=holder, DeviceIndex=1)
    ec2.associate_address(AllocationId=made.elastic_ips[0], InstanceId=holder)

    ctx, kube = gc_ctx({"NODEWARDEN_GC_TAGGING_API": "false", "NODEWARDEN_GC_WAIT_LIMIT_SECONDS": "900"})
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=6, advance=ctx.clock.advance)
    assert not run.finalized
    assert w.existing(aws, made) == made
    waiting_since = run.parent["metadata"]["annotations"][teardown_names.WAITING_SINCE]

    ctx.clock.advance(900)
    run = w.finalize_until_done(ctx, run.parent, advance=ctx.clock.advance)
    assert run.finalized, run.responses
    assert w.existing(aws, made) == w.Made(network_interfaces=made.network_interfaces,
                                           elastic_ips=made.elastic_ips)
    # The security group went in a call that also left the ENI: the wait's start stayed where it was.
    assert run.responses[0]["annotations"][teardown_names.WAITING_SINCE] == waiting_since
    left = [message for _, reason, message in kube.events if reason == "ExternalResourcesLeft"]
    assert len(left) == 1
    assert made.network_interfaces[0] in left[0] and made.elastic_ips[0] in left[0]
    assert all(value is None for value in run.responses[-1]["annotations"].values())


def test_once_everything_the_tagging_api_lists_is_given_up_the_listing_still_looks(aws, net, gc_ctx):
    """An ENI held by an instance no controller of alpha made is given up at the wait limit, and it is all the
    tagging API lists: a load balancer made moments ago is not listed yet (injected: its answer leaves load
    balancers out). The listing in that call finds it, and it is deleted before the cluster is let go."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), network_interfaces=1)
    aws("ec2").attach_network_interface(NetworkInterfaceId=made.network_interfaces[0],
                                        InstanceId=bystander_instance(aws, net), DeviceIndex=1)
    ctx, kube = gc_ctx({"NODEWARDEN_GC_WAIT_LIMIT_SECONDS": "900"})
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=3, advance=ctx.clock.advance)
    assert not run.finalized

    late = w.build_cluster(aws, net, "b", w.cluster_tags("alpha"), load_balancers=1)

    def lagging(parsed=None, model=None, **_):
        if model.name == "GetResources" and isinstance(parsed, dict):
            parsed["ResourceTagMappingList"] = [m for m in parsed.get("ResourceTagMappingList", [])
                                                if ":loadbalancer/" not in m["ResourceARN"]]

    ctx.aws.client("resourcegroupstaggingapi", w.REGION).meta.events.register("after-call", lagging)
    ctx.clock.advance(900)
    first = w.finalize_once(ctx, run.parent)
    assert first["finalized"] is False, "the listing found the load balancer"
    run = w.finalize_until_done(ctx, w.apply_decorator_response(run.parent, first), advance=ctx.clock.advance)
    assert run.finalized, run.responses
    assert w.existing(aws, late).count() == 0
    assert w.existing(aws, made) == made, "the held ENI is left, and named"
    assert any(reason == "ExternalResourcesLeft" for _, reason, _ in kube.events)


def test_the_wait_limit_counts_only_while_nothing_of_the_clusters_own_is_on_its_way_out(aws, net, gc_ctx):
    """The cluster's instance holds its Elastic IP. Its termination is refused for longer than the wait limit
    (injected), then it shuts down for a while (moto terminates at once, and keeps the address associated: the
    state is injected, and the address freed as AWS frees it once the instance is gone): the Elastic IP is
    waited for all that time and deleted once free, never given up for the time the instance took."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), instances=1, elastic_ips=1)
    association = aws("ec2").associate_address(AllocationId=made.elastic_ips[0],
                                               InstanceId=made.instances[0])["AssociationId"]
    # The listing alone: moto's tagging API does not list Elastic IPs.
    ctx, kube = gc_ctx({"NODEWARDEN_GC_TAGGING_API": "false", "NODEWARDEN_GC_WAIT_LIMIT_SECONDS": "900"})
    refused = w.Faults().add("TerminateInstances", "InternalError", times=float("inf")).attach(ctx.aws)
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=20, advance=lambda s: ctx.clock.advance(120))
    assert not run.finalized and refused.injected, "held by the error past the wait limit"
    assert w.existing(aws, made) == made

    refused.rules.clear()
    shutting_down = {"calls": 0}

    def still_shutting_down(parsed=None, model=None, **_):
        if model.name != "DescribeInstances" or not isinstance(parsed, dict):
            return
        for reservation in parsed.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                if instance["InstanceId"] in made.instances and instance["State"]["Name"] == "terminated":
                    shutting_down["calls"] += 1
                    if shutting_down["calls"] <= 4:
                        instance["State"] = {"Code": 32, "Name": "shutting-down"}
                    elif shutting_down["calls"] == 5:
                        aws("ec2").disassociate_address(AssociationId=association)

    ctx.aws.client("ec2", w.REGION).meta.events.register("after-call", still_shutting_down)
    run = w.finalize_until_done(ctx, run.parent, max_calls=20, advance=lambda s: ctx.clock.advance(120))
    assert run.finalized, run.responses
    assert shutting_down["calls"] > 4
    assert w.existing(aws, made).count() == 0, "the Elastic IP was given up"
    assert "ExternalResourcesLeft" not in kube.reasons()


def test_a_security_group_refused_as_in_use_for_ever_is_left_at_the_wait_limit(aws, net, gc_ctx):
    """Something cluster-gc does not delete uses the cluster's security group (another cluster's load balancer, a
    rule of another group; injected: moto refuses no DeleteSecurityGroup). It is tried on every call and waited
    for like an attachment: at the wait limit the cluster is let go with a Warning naming it."""
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), security_groups=1, load_balancers=1)
    ctx, kube = gc_ctx({"NODEWARDEN_GC_WAIT_LIMIT_SECONDS": "900"})
    refusals = w.Faults().add("DeleteSecurityGroup", "DependencyViolation", times=float("inf"),
                              message="resource sg has a dependent object").attach(ctx.aws)
    run = w.finalize_until_done(ctx, w.aws_cluster(), max_calls=4, advance=lambda s: ctx.clock.advance(60))
    assert not run.finalized
    assert w.existing(aws, made) == w.Made(security_groups=made.security_groups), "the load balancer went"
    annotations = run.parent["metadata"]["annotations"]
    assert annotations[teardown_names.REFUSED_IN_USE] == f"security-group/{made.security_groups[0]}"
    assert annotations[teardown_names.WAITING_SINCE]

    run = w.finalize_until_done(ctx, run.parent, max_calls=30, advance=lambda s: ctx.clock.advance(60))
    assert run.finalized, run.responses
    assert refusals.injected[("DeleteSecurityGroup", "DependencyViolation")] > 4, "tried on every call"
    left = [message for _, reason, message in kube.events if reason == "ExternalResourcesLeft"]
    assert len(left) == 1 and made.security_groups[0] in left[0] and "refused as in use" in left[0]
    assert all(value is None for value in run.responses[-1]["annotations"].values())
