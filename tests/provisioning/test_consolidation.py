"""Consolidation of a provisioning pool: Empty and Underutilized candidates, their clocks, the holds (pure)."""
from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hooks import machine_names, objects, provisioning_names, timefmt
from hooks.machines import budgets, signals
from hooks.machines.pool import machines_of
from hooks.machines.signals import EMPTY, UNDERUTILIZED
from hooks.machines.spec import WHEN_EMPTY, ProvisioningSpec
from hooks.nodepools import consolidation
from hooks.nodepools.methods import underutilized
from hooks.provisioning import resources
from hooks.provisioning.pods import requests_of
from worlds import pool_inputs

NOW = dt.datetime(2026, 11, 27, 13, 0, tzinfo=dt.timezone.utc)
POOL = "general"
ZONE_A, ZONE_B = "us-east-1a", "us-east-1b"
UNLIMITED = (budgets.Budget("100%"),)


def ago(seconds: float) -> str:
    return timefmt.fmt(NOW - dt.timedelta(seconds=seconds))


def machine(name: str, *, initialized: bool = True, deleting: bool = False, annotations: dict | None = None) -> dict:
    meta = {"name": name, "uid": f"uid-{name}", "creationTimestamp": ago(3600), "labels": {
        machine_names.POOL_LABEL: POOL}, "annotations": dict(annotations or {})}
    if deleting:
        meta["deletionTimestamp"] = ago(1)
    conditions = [{"type": machine_names.INITIALIZED, "status": "True" if initialized else "False"}]
    return {"apiVersion": machine_names.API_VERSION, "kind": machine_names.MACHINE_KIND, "metadata": meta,
            "spec": {}, "status": {"nodeName": f"node-{name}", "conditions": conditions}}


def node(name: str, cpu: str = "4", memory: str = "16Gi", *, zone: str = ZONE_A, labels: dict | None = None,
         ready: bool = True, unschedulable: bool = False, annotations: dict | None = None,
         taints: list | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"node-{name}", "annotations": dict(annotations or {}), "labels": {
                machine_names.MACHINE_LABEL: name, machine_names.POOL_LABEL: POOL, provisioning_names.ZONE_LABEL: zone,
                provisioning_names.HOSTNAME_LABEL: f"node-{name}", **(labels or {})}},
            "spec": {"unschedulable": unschedulable, "taints": list(taints or [])},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def running(name: str, on: str, cpu: str = "500m", memory: str = "512Mi", *, owner: str | None = "ReplicaSet",
            annotations: dict | None = None, started: float = 3600, labels: dict | None = None, **spec) -> dict:
    refs = [{"apiVersion": "v1", "kind": owner, "name": f"{name}-owner", "uid": f"uid-{name}-owner",
             "controller": True}] if owner else []
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-pod-{name}", "ownerReferences": refs,
                         "annotations": dict(annotations or {}), "labels": dict(labels or {"app": name}),
                         "creationTimestamp": ago(started)},
            "spec": {"nodeName": f"node-{on}",
                     "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                     **spec},
            "status": {"phase": "Running", "startTime": ago(started)}}


def daemon(name: str, on: str) -> dict:
    return running(name, on, "100m", "128Mi", owner="DaemonSet")


@dataclasses.dataclass
class World:
    """A pool's Machines, their Nodes and pods, as one round reads them."""

    machines: list = dataclasses.field(default_factory=list)
    nodes: list = dataclasses.field(default_factory=list)
    pods: list = dataclasses.field(default_factory=list)

    def add(self, name: str, *pods: dict, machine_kw: dict | None = None, **node_kw) -> World:
        self.machines.append(machine(name, **(machine_kw or {})))
        self.nodes.append(node(name, **node_kw))
        self.pods.extend(pods)
        return self

    def decide(self, *, previous=(), placed=(), launching: int = 0, policy: ProvisioningSpec = ProvisioningSpec(),
               rules=UNLIMITED, disrupting: int = 0, held=frozenset(), now=NOW, disruption_budgets=()) -> Consolidation:
        """The consolidation methods' part of one pass, with the round's placement and launches given."""
        machines = machines_of(self.machines)
        state, progress = pool_inputs.consolidated(
            machines, self.nodes, self.pods, name=POOL, now=now, policy=policy, rules=rules, previous=previous,
            placed=placed, launching=launching, held=held, disrupting=disrupting,
            disruption_budgets=disruption_budgets)
        view = progress.consolidating
        return Consolidation(
            candidates=progress.consolidation or [],
            remove=[Removal(c.name, c.reason, c.node, c.placement, c.message) for c in progress.chosen],
            blocked=dict(progress.blocked), held=view.held if view is not None else 0,
            events=progress.messages + consolidation.report(state, progress))


@dataclasses.dataclass
class Removal:
    machine: str
    reason: str
    node: str
    placement: dict
    message: str


@dataclasses.dataclass
class Consolidation:
    """What the consolidation methods decided in one pass, as these tests read it."""

    candidates: list
    remove: list
    blocked: dict
    held: int
    events: list


def record(name: str, reason: str, since: float) -> dict:
    return {"machine": name, "uid": f"uid-{name}", "reason": reason, "since": ago(since)}


def removed(out: Consolidation) -> dict[str, str]:
    return {r.machine: r.reason for r in out.remove}


def reasons(out: Consolidation) -> dict[str, str]:
    return {r["machine"]: r["reason"] for r in out.candidates}


def busy(name: str, cpu: str = "3") -> dict:
    """A pod that fills most of a 4-cpu Node: nothing else fits beside it."""
    return running(f"big-{name}", name, cpu, "1Gi")


# --------------------------------------------------------------------------- Empty


def test_a_node_with_only_daemonset_and_static_pods_is_empty_and_goes_once_due():
    mirror = running("kube-proxy", "a", owner="Node", annotations={objects.MIRROR_ANNOTATION: "x"})
    world = World().add("a", daemon("logs-a", "a"), mirror).add("b", busy("b"))
    first = world.decide()
    assert reasons(first) == {"a": EMPTY}
    assert first.candidates[0]["since"] == timefmt.fmt(NOW) and not first.remove
    later = world.decide(previous=first.candidates, now=NOW + dt.timedelta(seconds=30))
    assert removed(later) == {"a": EMPTY}
    assert later.remove[0].placement == {} and later.remove[0].node == "node-a"
    assert "Machine a" in later.events[0] and "Empty" in later.events[0]


def test_the_clock_must_run_for_consolidate_after_before_a_removal():
    world = World().add("a").add("b", busy("b"))
    assert not world.decide(previous=[record("a", EMPTY, 29)]).remove
    assert removed(world.decide(previous=[record("a", EMPTY, 30)])) == {"a": EMPTY}
    slow = ProvisioningSpec(consolidate_after=600.0)
    out = world.decide(previous=[record("a", EMPTY, 599)], policy=slow)
    assert not out.remove and out.candidates == [record("a", EMPTY, 599)]


def test_a_candidate_lost_then_regained_starts_its_clock_again():
    world = World().add("a").add("b", busy("b"))
    old = [record("a", EMPTY, 3600)]
    world.pods.append(running("web-1", "a", "3", "1Gi"))  # a pod lands: no longer Empty, nor movable
    lost = world.decide(previous=old)
    assert "a" not in reasons(lost) and not lost.remove
    world.pods.pop()
    back = world.decide(previous=lost.candidates, now=NOW + dt.timedelta(seconds=10))
    assert back.candidates == [{"machine": "a", "uid": "uid-a", "reason": EMPTY,
                                "since": timefmt.fmt(NOW + dt.timedelta(seconds=10))}]
    assert not back.remove


def test_a_record_for_another_machine_of_the_same_name_does_not_carry():
    world = World().add("a").add("b", busy("b"))
    stale = [{**record("a", EMPTY, 3600), "uid": "uid-of-an-older-a"}]
    out = world.decide(previous=stale)
    assert out.candidates[0]["since"] == timefmt.fmt(NOW) and not out.remove


def test_consolidate_after_never_makes_no_candidate():
    world = World().add("a").add("b")
    out = world.decide(previous=[record("a", EMPTY, 3600)], policy=ProvisioningSpec(consolidate_after=None))
    assert out.candidates == [] and out.remove == []


def test_finished_and_terminating_pods_leave_a_node_empty():
    done = running("job-1", "a")
    done["status"]["phase"] = "Succeeded"
    leaving = running("web-1", "a", annotations={provisioning_names.DO_NOT_DISRUPT: "true"})
    leaving["metadata"]["deletionTimestamp"] = ago(5)
    world = World().add("a", done, leaving).add("b", busy("b"))
    assert removed(world.decide(previous=[record("a", EMPTY, 60)])) == {"a": EMPTY}


# --------------------------------------------------------------------------- who may be a candidate


def test_only_settled_machines_are_candidates():
    world = World()
    world.add("launching", machine_kw={"initialized": False})
    world.add("deleting", machine_kw={"deleting": True})
    world.add("marked", machine_kw={"annotations": {signals.DISRUPTION_ANNOTATION: signals.Signal(
        signals.DRIFTED, NOW).encode()}})
    world.add("noticed", machine_kw={"annotations": {signals.INTERRUPTION_ANNOTATION: signals.Signal(
        signals.REBALANCE, NOW).encode()}})
    world.add("held")
    world.add("not-ready", ready=False)
    world.add("cordoned", unschedulable=True)
    world.add("tainted", taints=[{"key": machine_names.DISRUPTED_TAINT, "effect": "NoSchedule"}])
    world.add("placed")
    world.add("ok")
    previous = [record(m["metadata"]["name"], EMPTY, 3600) for m in world.machines]
    out = world.decide(previous=previous, placed={"node-placed"}, held={"held"})
    assert reasons(out) == {"ok": EMPTY}
    assert removed(out) == {"ok": EMPTY}


def test_a_machine_named_as_a_slot_of_this_round_is_not_a_candidate():
    world = World().add("a").add("b", busy("b"))
    out = world.decide(previous=[record("a", EMPTY, 3600)], placed={"a"})
    assert out.candidates == [] and not out.remove


def test_a_node_that_names_another_machine_is_not_this_machines_node():
    world = World().add("a").add("b", busy("b"))
    world.nodes[0]["metadata"]["labels"][machine_names.MACHINE_LABEL] = "someone-else"
    assert world.decide(previous=[record("a", EMPTY, 3600)]).candidates == []


def test_do_not_disrupt_on_a_pod_the_node_or_the_machine_blocks_consolidation():
    keep = {provisioning_names.DO_NOT_DISRUPT: "true"}
    world = World().add("pod", running("web-1", "pod", annotations=keep))
    world.add("daemon", running("agent", "daemon", owner="DaemonSet", annotations=keep))
    world.add("node", annotations=keep).add("machine", machine_kw={"annotations": keep})
    world.add("room", busy("room", "1"))
    previous = [record(n, r, 3600) for n in ("pod", "daemon", "node", "machine")
                for r in (EMPTY, UNDERUTILIZED)]
    out = world.decide(previous=previous)
    assert set(reasons(out)) == {"room"}  # room's pod would fit elsewhere; the others are kept
    other = World().add("pod", running("web-1", "pod", annotations={provisioning_names.DO_NOT_DISRUPT: "false"}))
    other.add("room", busy("room"))
    assert reasons(other.decide())["pod"] == UNDERUTILIZED


# --------------------------------------------------------------------------- Underutilized


def test_an_underutilized_machine_goes_when_its_pods_fit_on_the_others():
    world = World().add("a", running("web-1", "a"), running("web-2", "a"), daemon("logs-a", "a"))
    world.add("b", busy("b", "2"), daemon("logs-b", "b"))
    out = world.decide(previous=[record("a", UNDERUTILIZED, 60)])
    assert reasons(out) == {"a": UNDERUTILIZED, "b": UNDERUTILIZED}
    [removal] = out.remove
    assert (removal.machine, removal.reason) == ("a", UNDERUTILIZED)
    assert removal.placement == {"default/web-1": "node-b", "default/web-2": "node-b"}
    assert "2 pods" in removal.message and "node-b" in removal.message


def test_pods_that_do_not_fit_elsewhere_make_no_candidate():
    world = World().add("a", running("web-1", "a", "2")).add("b", busy("b", "3"))
    out = world.decide(previous=[record("a", UNDERUTILIZED, 3600)])
    assert out.candidates == [] and not out.remove


def test_when_empty_never_moves_pods():
    world = World().add("a", running("web-1", "a")).add("b").add("c", busy("c"))
    out = world.decide(previous=[record("a", UNDERUTILIZED, 3600)],
                       policy=ProvisioningSpec(consolidation_policy=WHEN_EMPTY))
    assert reasons(out) == {"b": EMPTY}
    assert removed(out) == {}  # b's clock starts now


def test_a_bare_pod_blocks_underutilized():
    world = World().add("a", running("lonely", "a", owner=None)).add("b")
    out = world.decide(previous=[record("a", UNDERUTILIZED, 3600), record("b", EMPTY, 3600)])
    assert reasons(out) == {"b": EMPTY}
    assert removed(out) == {"b": EMPTY}


def test_a_pod_with_a_host_port_is_not_moved():
    port = running("ingress", "a", containers=[{"name": "main", "ports": [{"containerPort": 80, "hostPort": 80}]}])
    world = World().add("a", port).add("b", busy("b", "1"))
    assert "a" not in reasons(world.decide(previous=[record("a", UNDERUTILIZED, 3600)]))


def test_each_pods_constraints_are_kept():
    only_a = running("pinned", "a", nodeSelector={"disk": "ssd"})
    world = World().add("a", only_a, labels={"disk": "ssd"}).add("b", busy("b", "1"))
    assert "a" not in reasons(world.decide())
    tolerant = World().add("a", running("web-1", "a")).add("b", busy("b", "1"), taints=[
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    assert "a" not in reasons(tolerant.decide())
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": provisioning_names.HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"app": "db"}}}]}}
    apart = World().add("a", running("db-1", "a", labels={"app": "db"}, affinity=anti))
    apart.add("b", running("db-0", "b", "1", labels={"app": "db"}, affinity=anti))
    assert apart.decide().candidates == []


def test_a_pod_with_a_volume_claim_moves_only_within_its_zone():
    claim = [{"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}]
    world = World().add("a", running("db-0", "a", volumes=claim), zone=ZONE_A)
    world.add("b", busy("b", "1"), zone=ZONE_B)
    assert "a" not in reasons(world.decide())
    world.add("c", busy("c", "1"), zone=ZONE_A)
    out = world.decide(previous=[record("a", UNDERUTILIZED, 3600)])
    assert out.remove[0].placement == {"default/db-0": "node-c"}


def test_a_pod_just_started_holds_the_clock_back():
    world = World().add("a", running("web-1", "a", started=10)).add("b", busy("b", "1"))
    out = world.decide(previous=[record("a", UNDERUTILIZED, 3600)])
    assert out.candidates[0]["since"] == ago(10) and not out.remove


def test_one_underutilized_removal_per_round_fewest_pods_first():
    world = World()
    world.add("three", running("t1", "three", "100m"), running("t2", "three", "100m"), running("t3", "three", "100m"))
    world.add("one-big", running("o1", "one-big", "1"))
    world.add("one-small", running("s1", "one-small", "200m"))
    world.add("target", busy("target", "1"))
    previous = [record(n, UNDERUTILIZED, 3600) for n in ("three", "one-big", "one-small", "target")]
    out = world.decide(previous=previous)
    assert removed(out) == {"one-small": UNDERUTILIZED}
    assert len(out.candidates) == 4


def test_the_choice_then_prefers_the_node_that_frees_the_most():
    world = World().add("small", running("p1", "small"), cpu="2", memory="8Gi")
    world.add("large", running("p2", "large"), cpu="8", memory="32Gi").add("target", busy("target", "2"))
    previous = [record(n, UNDERUTILIZED, 3600) for n in ("small", "large")]
    assert removed(world.decide(previous=previous)) == {"large": UNDERUTILIZED}
    twins = World().add("x", running("p1", "x")).add("w", running("p2", "w")).add("target", busy("target", "2"))
    previous = [record(n, UNDERUTILIZED, 3600) for n in ("x", "w")]
    assert removed(twins.decide(previous=previous)) == {"w": UNDERUTILIZED}


def test_the_search_stops_at_the_first_due_candidate_and_those_past_it_keep_their_records():
    world = World().add("a", running("p1", "a", "100m"))
    world.add("b", running("p2", "b", "100m"), running("p3", "b", "100m"))
    world.add("c", running("p4", "c", "100m"), running("p5", "c", "100m"), running("p6", "c", "100m"))
    world.add("target", busy("target", "1"), machine_kw={"annotations": {provisioning_names.DO_NOT_DISRUPT: "true"}})
    previous = [record("a", UNDERUTILIZED, 3600), record("b", UNDERUTILIZED, 1800)]
    out = world.decide(previous=previous)
    assert removed(out) == {"a": UNDERUTILIZED}
    # b was not checked this round: its clock runs on; c was not a candidate before and is none yet.
    assert [r for r in out.candidates if r["machine"] != "a"] == [record("b", UNDERUTILIZED, 1800)]


def test_the_search_checks_at_most_so_many_machines_cheapest_to_move_first(monkeypatch):
    world = World()
    for name in ("f1", "f2"):  # one small pod each, held to its own Node by a label no other Node has
        world.add(name, running(f"{name}-p", name, "100m", nodeSelector={"only": name}), labels={"only": name})
    world.add("u", running("u1", "u", "100m"), running("u2", "u", "100m"))
    world.add("target", busy("target", "1"), machine_kw={"annotations": {provisioning_names.DO_NOT_DISRUPT: "true"}})
    previous = [record("u", UNDERUTILIZED, 3600)]
    monkeypatch.setattr(underutilized, "MAX_CHECKS", 2)
    out = world.decide(previous=previous)
    assert out.candidates == [] and out.remove == []
    monkeypatch.setattr(underutilized, "MAX_CHECKS", 3)
    assert removed(world.decide(previous=previous)) == {"u": UNDERUTILIZED}


def test_only_due_candidates_are_chosen():
    world = World().add("fresh", running("p1", "fresh", "100m")).add("old", running("p2", "old", "1"))
    world.add("target", busy("target", "1"))
    previous = [record("fresh", UNDERUTILIZED, 5), record("old", UNDERUTILIZED, 3600)]
    assert removed(world.decide(previous=previous)) == {"old": UNDERUTILIZED}


def test_targets_exclude_nodes_taking_pending_pods_disrupting_or_removed_this_round():
    world = World().add("u", running("web-1", "u")).add("e").add("d", busy("d", "1"))
    previous = [record("u", UNDERUTILIZED, 3600), record("e", EMPTY, 3600)]
    # e goes (Empty): u's pod would fit only on e or d, and d is disrupting.
    out = world.decide(previous=previous, held={"d"})
    assert removed(out) == {"e": EMPTY}
    assert "u" not in reasons(out)
    # e takes a pending pod this round: neither a candidate nor a target; d is the only room for u's pod.
    out = world.decide(previous=previous, placed={"node-e"})
    assert reasons(out)["u"] == UNDERUTILIZED and "e" not in reasons(out)
    assert out.remove[0].placement == {"default/web-1": "node-d"}


def _budget(name: str, allowed: int, labels: dict | None, *, generation: int = 1, observed: int | None = 1) -> dict:
    status = {"disruptionsAllowed": allowed}
    if observed is not None:
        status["observedGeneration"] = observed
    spec = {} if labels is None else {"selector": {"matchLabels": labels}}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default", "generation": generation}, "spec": spec,
            "status": status}


@pytest.mark.parametrize("budgets_in_the_way", [
    [_budget("web", 0, {"app": "web"})],
    [_budget("web", 1, {"app": "web"}), _budget("everything", 5, {})],  # two select it: no eviction at all
    [_budget("web", 1, {"app": "web"}, generation=2, observed=1)],  # not judged since it changed
    [_budget("web", 1, {"app": "web"}, observed=None)],
])
def test_a_machine_whose_pod_a_disruption_budget_keeps_now_is_no_candidate(budgets_in_the_way):
    world = World().add("a", running("web-1", "a", labels={"app": "web"})).add("b", busy("b", "1"))
    out = world.decide(previous=[record("a", UNDERUTILIZED, 3600)], disruption_budgets=budgets_in_the_way)
    assert removed(out) == {} and "a" not in reasons(out)


def test_a_disruption_budget_that_allows_an_eviction_or_selects_other_pods_does_not_hold_the_choice():
    world = World().add("a", running("web-1", "a", labels={"app": "web"})).add("b", busy("b", "1"))
    for budgets_aside in ([_budget("web", 1, {"app": "web"})], [_budget("db", 0, {"app": "db"})],
                          [_budget("none", 0, None)]):
        out = world.decide(previous=[record("a", UNDERUTILIZED, 3600)], disruption_budgets=budgets_aside)
        assert removed(out) == {"a": UNDERUTILIZED}


# --------------------------------------------------------------------------- no churn


def test_pending_pods_the_round_launches_for_hold_every_removal_but_keep_the_clocks():
    world = World().add("a").add("b", running("web-1", "b")).add("c", busy("c", "1"))
    previous = [record("a", EMPTY, 3600), record("b", UNDERUTILIZED, 3600)]
    out = world.decide(previous=previous, launching=3)
    assert out.remove == [] and out.held == 2
    assert [r for r in out.candidates if r["machine"] in "ab"] == previous
    assert any("3 pending pods" in e for e in out.events)


def test_a_budget_of_zero_holds_and_the_disrupting_count_against_it():
    world = World().add("a").add("b").add("c").add("d", busy("d"))
    previous = [record(n, EMPTY, 3600) for n in "abc"]
    none = world.decide(previous=previous, rules=(budgets.Budget("0", (EMPTY,)),))
    assert none.remove == [] and none.blocked == {EMPTY: 3}
    assert len(none.candidates) == 3 and any("budget" in e for e in none.events)
    two = world.decide(previous=previous, rules=(budgets.Budget("2"),), disrupting=1)
    assert removed(two) == {"a": EMPTY} and two.blocked == {EMPTY: 2}
    other_reason = world.decide(previous=previous, rules=(budgets.Budget("0", (signals.DRIFTED,)),))
    assert len(other_reason.remove) == 3


def test_empty_removals_and_the_underutilized_one_share_the_budget():
    world = World().add("e").add("u", running("web-1", "u")).add("t", busy("t", "1"))
    previous = [record("e", EMPTY, 3600), record("u", UNDERUTILIZED, 3600)]
    out = world.decide(previous=previous, rules=(budgets.Budget("1"),))
    assert removed(out) == {"e": EMPTY} and out.blocked == {UNDERUTILIZED: 1}


def test_records_are_read_through_bounds():
    good = record("a", EMPTY, 10)
    status = {"consolidation": [good, "junk", {**good, "reason": "Whim"}, {**good, "since": "yesterday"},
                                {"machine": "b"}, {**good, "uid": 7}]}
    assert consolidation.records_of(status) == [good]
    assert consolidation.records_of({"consolidation": "nope"}) == []
    assert consolidation.records_of(None) == []


# --------------------------------------------------------------------------- property


def _quantity_cpu(milli: int) -> str:
    return f"{milli}m"


@st.composite
def _worlds(draw):
    world = World()
    count = draw(st.integers(2, 5))
    for i in range(count):
        name = f"m{i}"
        cpu = draw(st.sampled_from([1000, 2000, 4000]))
        zone = draw(st.sampled_from([ZONE_A, ZONE_B]))
        disk = draw(st.sampled_from([None, "ssd"]))
        pods, used = [], 100
        for j in range(draw(st.integers(0, 4))):
            asked = draw(st.sampled_from([100, 250, 500, 1000]))
            if used + asked > cpu:
                break
            used += asked
            spec = {}
            if disk and draw(st.booleans()):
                spec["nodeSelector"] = {"disk": disk}
            if draw(st.integers(0, 4)) == 0:
                spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"{name}-{j}"}}]
            pods.append(running(f"{name}-p{j}", name, _quantity_cpu(asked), "256Mi", **spec))
        pods.append(daemon(f"{name}-ds", name))
        world.add(name, *pods, cpu=_quantity_cpu(cpu), memory="4Gi", zone=zone,
                  labels={"disk": disk} if disk else {})
    return world


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_worlds(), st.booleans())
def test_a_removal_never_leaves_a_pod_that_does_not_fit_on_the_remaining_nodes(world, launching):
    previous = []
    for m in world.machines:
        for reason in (EMPTY, UNDERUTILIZED):
            previous.append(record(m["metadata"]["name"], reason, 3600))
    out = world.decide(previous=previous, launching=int(launching))
    if launching:
        assert out.remove == []
        return
    gone = {f"node-{r.machine}" for r in out.remove}
    nodes = {n["metadata"]["name"]: n for n in world.nodes}
    free = {name: resources.parse(n["status"]["allocatable"]) for name, n in nodes.items() if name not in gone}
    for p in world.pods:
        if p["spec"]["nodeName"] in free:
            free[p["spec"]["nodeName"]] -= requests_of(p["spec"])
    for removal in out.remove:
        moving = [p for p in world.pods if p["spec"]["nodeName"] == f"node-{removal.machine}"
                  and p["metadata"]["ownerReferences"][0]["kind"] != "DaemonSet"]
        assert set(removal.placement) == {f"default/{p['metadata']['name']}" for p in moving}
        for p in moving:
            target = removal.placement[f"default/{p['metadata']['name']}"]
            assert target in free, f"{p['metadata']['name']} placed on {target}, which is going"
            labels = nodes[target]["metadata"]["labels"]
            assert all(labels.get(k) == v for k, v in (p["spec"].get("nodeSelector") or {}).items())
            if p["spec"].get("volumes"):
                source = nodes[p["spec"]["nodeName"]]["metadata"]["labels"][provisioning_names.ZONE_LABEL]
                assert labels[provisioning_names.ZONE_LABEL] == source
            free[target] -= requests_of(p["spec"])
            assert resources.ZERO.fits(free[target]), f"{target} overcommitted"
    assert sum(1 for r in out.remove if r.reason == UNDERUTILIZED) <= 1
