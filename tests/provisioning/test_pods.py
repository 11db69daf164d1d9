"""What provisioning reads of a pod, and which pods are its to place."""
from __future__ import annotations

import datetime as dt

import pytest

from hooks import provisioning_names as names
from hooks.provisioning import batching, pods
from hooks.provisioning.resources import Resources
from tests.support.provisioning import NOW, raw_pod, stamp


def _requests(spec: dict) -> Resources:
    view = pods.view({"metadata": {"name": "p"}, "spec": spec})
    assert view.unsupported is None, view.unsupported
    return view.requests


def _container(cpu: str, memory: str = "0", **extra) -> dict:
    return {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}, **extra}


def test_requests_are_the_containers_plus_one_pod():
    assert _requests({"containers": [_container("100m", "1Mi"), _container("200m", "2Mi")]}) == \
        Resources(cpu=300, memory=3 << 20, pods=1)


def test_a_larger_init_container_decides():
    assert _requests({"containers": [_container("100m")], "initContainers": [_container("2"), _container("1")]}) == \
        Resources(cpu=2000, pods=1)


def test_sidecars_add_up_and_run_beside_later_init_containers():
    spec = {"containers": [_container("100m")],
            "initContainers": [_container("300m", restartPolicy="Always"), _container("500m"),
                               _container("50m", restartPolicy="Always")]}
    # Running: 100 + 300 + 50; the plain init container ran beside the first sidecar: 500 + 300.
    assert _requests(spec) == Resources(cpu=800, pods=1)
    spec["containers"] = [_container("1")]
    assert _requests(spec) == Resources(cpu=1350, pods=1)


def test_overhead_is_added():
    assert _requests({"containers": [_container("100m")], "overhead": {"cpu": "250m", "memory": "120Mi"}}) == \
        Resources(cpu=350, memory=120 << 20, pods=1)


def test_a_pod_without_requests_asks_for_a_pod():
    assert _requests({"containers": [{"name": "c"}]}) == Resources(pods=1)


def test_key_labels_and_selectors():
    view = pods.view(raw_pod("web-1", namespace="shop", labels={"app": "web"},
                             nodeSelector={names.ARCH_LABEL: "arm64"}))
    assert (view.key, view.uid, view.namespace, view.labels) == ("shop/web-1", "uid-shop-web-1", "shop", {"app": "web"})
    assert view.alternatives[0].allows({names.ARCH_LABEL: "arm64"})
    assert not view.alternatives[0].allows({names.ARCH_LABEL: "amd64"})


def test_required_terms_are_ored_with_the_node_selector_in_each():
    view = pods.view(raw_pod("p", nodeSelector={"disk": "ssd"}, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": names.ZONE_LABEL, "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": names.ZONE_LABEL, "operator": "In", "values": ["b"]}]},
            {}]}}}))
    assert len(view.alternatives) == 2
    assert any(alt.allows({"disk": "ssd", names.ZONE_LABEL: "b"}) for alt in view.alternatives)
    assert not any(alt.allows({names.ZONE_LABEL: "b"}) for alt in view.alternatives)


def test_terms_that_contradict_the_node_selector_leave_no_alternative():
    view = pods.view(raw_pod("p", nodeSelector={"disk": "ssd"}, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "NotIn", "values": ["ssd"]}]}]}}}))
    assert view.unsupported is None and view.alternatives == ()


def test_preferred_terms_heaviest_first():
    view = pods.view(raw_pod("p", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}},
        {"weight": 90, "preference": {"matchExpressions": [{"key": "b", "operator": "Exists"}]}}]}}))
    assert [w for w, _ in view.preferred_terms] == [90, 10]


def test_spread_and_anti_affinity():
    selector = {"matchLabels": {"app": "web"}}
    view = pods.view(raw_pod("web-1", labels={"app": "web", "rev": "7"}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": names.ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector,
         "matchLabelKeys": ["rev"]},
        {"maxSkew": 2, "topologyKey": names.HOSTNAME_LABEL, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector},
        {"maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": selector},
    ], affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": names.HOSTNAME_LABEL, "labelSelector": selector}]}}))
    assert view.unsupported is None
    zone, host = view.spreads
    assert (zone.zone, zone.hard, zone.max_skew) == (True, True, 1)
    assert (host.zone, host.hard, host.max_skew) == (False, False, 2)
    assert zone.selector.matches("default", {"app": "web", "rev": "7"})
    assert not zone.selector.matches("default", {"app": "web", "rev": "6"})  # matchLabelKeys
    assert not zone.selector.matches("other", {"app": "web", "rev": "7"})
    assert view.anti_affinity[0].matches("default", {"app": "web"})


def test_host_ports_as_kube_scheduler_counts_them():
    spec = {"containers": [
        {"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 53, "hostPort": 53,
                                                                          "protocol": "UDP", "hostIP": "10.0.0.1"},
                                {"containerPort": 9090}]},
        {"name": "b", "ports": [{"containerPort": 81, "hostPort": 8080}]}],
        "initContainers": [{"name": "setup", "ports": [{"containerPort": 1, "hostPort": 7000}]}]}
    view = pods.view({"metadata": {"name": "p"}, "spec": spec})
    assert view.host_ports == (pods.HostPort("0.0.0.0", "TCP", 8080), pods.HostPort("10.0.0.1", "UDP", 53))
    assert pods.resident({"metadata": {"name": "p"}, "spec": spec}).host_ports == view.host_ports
    on_host = pods.view({"metadata": {"name": "p"}, "spec": {"hostNetwork": True, "containers": [
        {"name": "a", "ports": [{"containerPort": 9100}, {"containerPort": 9200, "hostPort": 9201}]}]}})
    assert on_host.host_ports == (pods.HostPort("0.0.0.0", "TCP", 9100), pods.HostPort("0.0.0.0", "TCP", 9201))


def test_host_port_conflicts():
    every, one, other = (pods.HostPort(ip, "TCP", 80) for ip in ("0.0.0.0", "10.0.0.1", "10.0.0.2"))
    assert pods.port_conflict((one,), {every}) == one
    assert pods.port_conflict((every,), {one}) == every
    assert pods.port_conflict((one,), {one}) == one
    assert pods.port_conflict((one,), {other}) is None
    assert pods.port_conflict((one,), {pods.HostPort("10.0.0.1", "UDP", 80), pods.HostPort("10.0.0.1", "TCP", 81)}) \
        is None


@pytest.mark.parametrize("spec, reason", [
    ({"containers": [_container("lots")]}, "spec.containers[0].resources.requests.cpu"),
    ({"containers": "x"}, "spec.containers"),
    ({"containers": [], "tolerations": [{"operator": "Sometimes"}]}, "spec.tolerations[0].operator"),
    ({"containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 70000}]}]},
     "spec.containers[0].ports[0].hostPort"),
    ({"containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 80, "protocol": "HTTP"}]}]},
     "spec.containers[0].ports[0].protocol"),
    ({"containers": [], "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {}}]}, "not supported"),
    ({"containers": [], "topologySpreadConstraints": [
        {"maxSkew": 0, "topologyKey": names.ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule"}]}, "maxSkew"),
    ({"containers": [], "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": names.ZONE_LABEL, "labelSelector": {}}]}}}, "pod affinity is not supported"),
    ({"containers": [], "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": names.ZONE_LABEL, "labelSelector": {}}]}}}, "anti-affinity over"),
    ({"containers": [], "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": names.HOSTNAME_LABEL, "labelSelector": {}, "namespaceSelector": {"matchLabels": {"a": "b"}}}]}}},
     "namespaceSelector"),
    ({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]}]}}}},
     "values"),
])
def test_what_it_cannot_model_makes_the_pod_unsupported(spec, reason):
    view = pods.view({"metadata": {"name": "p", "namespace": "n"}, "spec": spec})
    assert view.unsupported is not None and reason in view.unsupported
    assert view.key == "n/p"


@pytest.mark.parametrize("garbage", [None, "pod", [], {"metadata": "x", "spec": 3},
                                     {"metadata": {"name": 5, "labels": ["a"]}, "spec": {"nodeSelector": "x"}}])
def test_garbage_never_raises(garbage):
    view = pods.view(garbage)
    assert isinstance(view, pods.PodView)
    assert not pods.is_provisionable(garbage)
    assert pods.unschedulable_since(garbage) is None


def test_a_daemonset_template_keeps_what_admits_it():
    view = pods.from_daemonset({"metadata": {"name": "agent", "namespace": "kube-system"}, "spec": {"template": {
        "metadata": {"labels": {"app": "agent"}},
        "spec": {"containers": [_container("100m", "64Mi")], "nodeSelector": {names.ARCH_LABEL: "arm64"},
                 "tolerations": [{"operator": "Exists"}],
                 "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}}}}})
    assert view.unsupported is None
    assert view.key == "kube-system/agent"
    assert view.requests == Resources(cpu=100, memory=64 << 20, pods=1)
    assert view.alternatives[0].allows({names.ARCH_LABEL: "arm64"})


def test_is_provisionable():
    pending = raw_pod("p")
    assert pods.is_provisionable(pending)
    assert pods.unschedulable_since(pending) == NOW - dt.timedelta(seconds=5)
    changes = [
        lambda p: p["status"].update(phase="Running"),
        lambda p: p["spec"].update(nodeName="n1"),
        lambda p: p["metadata"].update(deletionTimestamp=stamp(1)),
        lambda p: p["metadata"].update(ownerReferences=[{"kind": "DaemonSet", "name": "d"}]),
        lambda p: p["spec"].update(schedulingGates=[{"name": "wait"}]),
        lambda p: p["status"]["conditions"][0].update(reason="SchedulerError"),
        lambda p: p["status"]["conditions"][0].update(status="True"),
        lambda p: p["status"].update(conditions=None),
    ]
    for change in changes:
        pod = raw_pod("p")
        change(pod)
        assert not pods.is_provisionable(pod)
    owned = raw_pod("p")
    owned["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "r"}]
    assert pods.is_provisionable(owned)


def test_a_pod_nominated_for_preemption_is_not_provisionable():
    preempting = raw_pod("p", since=0.1)
    preempting["status"]["nominatedNodeName"] = "node-1"
    assert not pods.is_provisionable(preempting)
    # Nor does it hold the batch window open for the others.
    assert batching.window([raw_pod("q", since=5), preempting], NOW) == (True, 0.0)
    preempting["status"]["nominatedNodeName"] = ""
    assert pods.is_provisionable(preempting)


def test_window_waits_while_pods_keep_arriving():
    assert batching.window([raw_pod("a", since=3), raw_pod("b", since=0.4)], NOW) == (False, pytest.approx(0.6))
    assert batching.window([raw_pod("a", since=3), raw_pod("b", since=1.5)], NOW) == (True, 0.0)


def test_window_never_waits_past_the_maximum_after_the_oldest():
    assert batching.window([raw_pod("a", since=10.5), raw_pod("b", since=0.1)], NOW) == (True, 0.0)
    ready, wait = batching.window([raw_pod("a", since=9.8), raw_pod("b", since=0.1)], NOW)
    assert not ready and wait == pytest.approx(0.2)


def test_window_counts_only_the_pods_that_arrived_since_the_last_round():
    waiting_for_an_hour, newcomer = raw_pod("old", since=3600), raw_pod("new", since=0.3)
    last_round = NOW - dt.timedelta(seconds=20)
    assert batching.window([waiting_for_an_hour, newcomer], NOW, last_round=last_round) == \
        (False, pytest.approx(0.7))
    # The maximum runs from the oldest newcomer, not from the pod decided long ago.
    first = raw_pod("first", since=9.5)
    ready, wait = batching.window([waiting_for_an_hour, first, newcomer], NOW, last_round=last_round)
    assert not ready and wait == pytest.approx(0.5)
    # Nothing new since the last round: the pods still pending are decided again at once.
    assert batching.window([waiting_for_an_hour], NOW, last_round=last_round) == (True, 0.0)


def test_window_without_a_trustworthy_last_round_counts_every_pod():
    pods_now = [raw_pod("old", since=3600), raw_pod("new", since=0.3)]
    assert batching.window(pods_now, NOW, last_round=None) == (True, 0.0)
    ahead = NOW + dt.timedelta(seconds=30)  # written by a clock ahead of ours
    assert batching.window(pods_now, NOW, last_round=ahead) == (True, 0.0)


def test_window_counts_a_pod_of_the_last_rounds_second_as_new():
    """Condition times are whole seconds, cut down: a pod stamped with the last round's second may have turned
    unschedulable after that round."""
    last_round = dt.datetime(2026, 11, 27, 12, 59, 59, 600000, tzinfo=dt.timezone.utc)
    same_second, before = raw_pod("same"), raw_pod("before")
    same_second["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-27T12:59:59Z"
    before["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-27T12:59:58Z"
    now = NOW - dt.timedelta(seconds=0.2)  # 0.8 s after the second the pod names
    assert batching.window([same_second, before], now, last_round=last_round) == (False, pytest.approx(0.2))
    assert batching.window([before], now, last_round=last_round) == (True, 0.0)


def test_window_ignores_pods_that_are_not_provisioning_s():
    running = raw_pod("a", since=0.1)
    running["status"]["phase"] = "Running"
    assert batching.window([running], NOW) == (True, 0.0)
    assert batching.window([], NOW) == (True, 0.0)
    ahead = raw_pod("a", since=-30)  # a clock ahead of ours: just turned unschedulable
    assert batching.window([ahead], NOW) == (False, 1.0)
