"""A NodePool and its Machines as the API server holds them, with Metacontroller's part played (no AWS).

Shared by tests/machines/test_disruption_units.py (scripted scenarios and the state-machine property):

- ``PoolWorld.sync``: one nodepool sync through the controller's own ``decide``,
  on a request shaped as Metacontroller sends it (worlds/envelope.py)
  and decided as the pipeline decides a verified one, with the pool's
  Machines and our FencingRequests as the API server lists them (what
  ``gather`` observes). The pool's marks (``kube.mark-disrupted``) are
  written to the Machines, then the response is applied in Metacontroller's
  order: the children first (each create and each delete a write of its
  own), then the pool's status. Any of those writes may be made to fail.
- What the rest of the cluster does between syncs: a kubelet registers
  (``register``), the Node becomes ready (``initialize``), fencing powers a
  Node off (``fence``) and recovers its pods (``recover``), EC2 recommends
  a rebalance (``notice``), a Machine deletes itself (``interrupt``,
  ``lose``), a finalizer finishes (``finish``), a user or an autoscaler
  changes the pool (``scale``, ``change_template``).
- ``made_for``: which Machine each new Machine was made to replace, as the
  pool's own response said when it was created (its records name it), and
  ``chosen``: every Machine a write of the pool's has shown it chose (a record
  written, a mark written, a replacement created for it). The test's ground
  truth, independent of how the pool proves either later.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
from typing import Callable

from hooks import conditions, controllers, timefmt
from hooks.config import load_settings
from hooks.contract import parse_request
from hooks.fencing.names import ACTION_OFF, FENCING_SUCCEEDED, RECOVERED, RECOVERING
from hooks.machines import names, signals
from worlds.envelope import hook_request

T0 = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)
NAMESPACE = "nodewarden-system"
POOL_UID = "uid-pool"


def _copy(value):
    """A deep copy of plain JSON, as the API server hands out (much cheaper than copy.deepcopy)."""
    return json.loads(json.dumps(value))


@dataclasses.dataclass
class Sync:
    """One sync: the world before it, what the pool answered, and what of it was written."""

    before: dict[str, dict]  # the Machines as the API server had them, by name
    previous: list[dict]  # the pool's records as its status had them
    chosen: set[str]  # uids of the Machines the pool's writes had shown it chose (PoolWorld.chosen)
    known: set[str]  # the children Metacontroller showed the pool (its cache)
    response: dict
    records: list[dict]  # the records the pool answered (written or not)
    created: list[str]
    let_go: list[str]  # live Machines Metacontroller knew and the pool no longer returned
    replicas: int


class PoolWorld:
    def __init__(self, replicas: int = 3, budget: str | None = "1", initialized: int | None = None):
        self.now = T0
        self.serial = 0
        self.template = 0
        spec = {"replicas": replicas, "registrationTTL": "15m", "drainTimeout": "10m",
                "template": {"spec": self._template_spec()}}
        if budget is not None:
            spec["disruption"] = {"budgets": [{"nodes": budget}]}
        self.pool = {"apiVersion": names.API_VERSION, "kind": names.NODEPOOL_KIND,
                     "metadata": {"name": "web", "uid": POOL_UID, "generation": 1,
                                  "creationTimestamp": timefmt.fmt(T0)},
                     "spec": spec, "status": {}}
        self.machines: dict[str, dict] = {}
        self.requests: list[dict] = []
        self.made_for: dict[str, str] = {}  # new Machine's uid -> uid of the Machine it was made to replace
        self.chosen: set[str] = set()
        self.settings = load_settings({"NODEWARDEN_CLUSTER_NAME": ""})
        for i in range(replicas if initialized is None else initialized):
            machine = self._create({"apiVersion": names.API_VERSION, "kind": names.MACHINE_KIND,
                                    "metadata": {"name": f"web-{i:05d}", "labels": {names.POOL_LABEL: "web"},
                                                 "annotations": {names.TEMPLATE_HASH: self.template_hash}},
                                    "spec": {}})
            self.initialize(machine["metadata"]["name"])

    # -- the pool ------------------------------------------------------------
    def _template_spec(self) -> dict:
        return {"instanceTypes": ["m5.large"], "subnets": ["subnet-1"], "imageId": f"ami-{self.template:08d}"}

    @property
    def template_hash(self) -> str:
        from hooks.machines import spec
        return spec.pool(self.pool).template_hash

    @property
    def replicas(self) -> int:
        return self.pool["spec"]["replicas"]

    def scale(self, replicas: int) -> None:
        self.pool["spec"]["replicas"] = replicas

    def change_template(self, back: bool = False) -> None:
        """A new template, or (``back``) the one before it again."""
        self.template = max(0, self.template - 1) if back else self.template + 1
        self.pool["spec"]["template"]["spec"] = self._template_spec()

    # -- the Machines --------------------------------------------------------
    def _create(self, child: dict) -> dict:
        self.serial += 1
        meta = child["metadata"]
        obj = {"apiVersion": names.API_VERSION, "kind": names.MACHINE_KIND,
               "metadata": {"name": meta["name"], "uid": f"uid-{self.serial}",
                            "creationTimestamp": timefmt.fmt(self.now),
                            "labels": dict(meta.get("labels") or {}),
                            "annotations": dict(meta.get("annotations") or {}),
                            "ownerReferences": [{"apiVersion": names.API_VERSION, "kind": names.NODEPOOL_KIND,
                                                 "name": "web", "uid": POOL_UID, "controller": True}]},
               "spec": copy.deepcopy(child.get("spec") or {}), "status": {"conditions": []}}
        self.machines[meta["name"]] = obj
        return obj

    def live(self) -> list[dict]:
        return [m for m in self.machines.values() if not m["metadata"].get("deletionTimestamp")]

    def deleting(self) -> list[dict]:
        return [m for m in self.machines.values() if m["metadata"].get("deletionTimestamp")]

    def _condition(self, machine: dict, ctype: str) -> None:
        status, _ = conditions.set(machine["status"], ctype, "True", ctype, ctype, timefmt.fmt(self.now))
        machine["status"]["conditions"] = status["conditions"]

    def powered_off(self, machine: dict) -> bool:
        node = machine["status"].get("nodeName")
        return any(r["spec"]["nodeRef"]["name"] == node for r in self.requests) if node else False

    def register(self, name: str) -> None:
        machine = self.machines[name]
        if machine["metadata"].get("deletionTimestamp") or machine["status"].get("nodeName"):
            return
        uid = machine["metadata"]["uid"]
        machine["status"].update(nodeName=f"node-{uid}", nodeUID=f"nuid-{uid}", instanceID=f"i-{uid}")
        self._condition(machine, names.REGISTERED)

    def initialize(self, name: str) -> None:
        """The Node is Ready and its startup taints are gone; never for a Node fencing powered off."""
        machine = self.machines[name]
        self.register(name)
        if machine["metadata"].get("deletionTimestamp") or self.powered_off(machine):
            return
        self._condition(machine, names.INITIALIZED)

    def initialized(self, name: str) -> bool:
        machine = self.machines.get(name)
        return machine is not None and conditions.is_true(machine["status"], names.INITIALIZED)

    def fence(self, name: str) -> None:
        """Our FencingRequest powered off the Machine's instance behind its Node, confirmed; recovery under way."""
        machine = self.machines[name]
        if not machine["status"].get("nodeName") or self.powered_off(machine):
            return
        status = machine["status"]
        self.requests.append({
            "apiVersion": names.API_VERSION, "kind": "FencingRequest",
            "metadata": {"name": f"{status['nodeName']}-fence", "namespace": NAMESPACE,
                         "uid": f"fr-{machine['metadata']['uid']}"},
            "spec": {"nodeRef": {"name": status["nodeName"], "uid": status["nodeUID"]}, "action": ACTION_OFF},
            "status": {"phase": RECOVERING,
                       "conditions": [{"type": FENCING_SUCCEEDED, "status": "True",
                                       "lastTransitionTime": timefmt.fmt(self.now)}],
                       "providerStatus": {"instanceID": status["instanceID"], "nodeUID": status["nodeUID"]}}})

    def recover(self, name: str) -> None:
        node = self.machines[name]["status"].get("nodeName")
        for request in self.requests:
            if request["spec"]["nodeRef"]["name"] == node and not conditions.is_true(request["status"], RECOVERED):
                request["status"]["conditions"].append({"type": RECOVERED, "status": "True",
                                                        "lastTransitionTime": timefmt.fmt(self.now)})

    def recovered(self, machine: dict) -> bool:
        node = machine["status"].get("nodeName")
        found = [r for r in self.requests if r["spec"]["nodeRef"]["name"] == node] if node else []
        return all(conditions.is_true(r["status"], RECOVERED) for r in found)

    def interrupt(self, name: str) -> None:
        """A spot interruption warning: the Machine deletes itself (hooks.machines.disrupted)."""
        machine = self.machines[name]
        notice = signals.Signal(signals.SPOT_INTERRUPTION, self.now, self.now + dt.timedelta(minutes=2))
        machine["metadata"]["annotations"][signals.INTERRUPTION_ANNOTATION] = notice.encode()
        self._delete(machine)

    def notice(self, name: str) -> None:
        """A rebalance recommendation for the Machine's instance: the pool replaces it surge-first."""
        machine = self.machines[name]
        notice = signals.Signal(signals.REBALANCE, self.now)
        machine["metadata"]["annotations"].setdefault(signals.INTERRUPTION_ANNOTATION, notice.encode())

    def lose(self, name: str) -> None:
        """The Machine deletes itself: never registered within its TTL, or its instance or Node is gone."""
        self._delete(self.machines[name])

    def _delete(self, machine: dict) -> None:
        machine["metadata"].setdefault("deletionTimestamp", timefmt.fmt(self.now))

    def finish(self, name: str) -> None:
        """The Machine's finalizer is done (drained, terminated): the API server lets it go."""
        if self.machines[name]["metadata"].get("deletionTimestamp"):
            del self.machines[name]

    def tick(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)

    # -- Metacontroller ------------------------------------------------------
    def sync(self, *, fail_status: bool = False, fail_child: Callable[[str], bool] = lambda name: False,
             fail_marks: bool = False, cache: list[dict] | None = None) -> Sync:
        """One sync. ``fail_child``: whether the create or delete of a child of that name fails; ``cache``: the
        children as Metacontroller's cache has them (the API server's by default)."""
        before = _copy(self.machines)
        previous = _copy(self.open_records())
        chosen = set(self.chosen)
        shown = _copy(list(self.machines.values()) if cache is None else cache)
        kind, module = controllers.load("nodepool")
        body = hook_request("nodepool", _copy(self.pool), children=shown)
        request = dataclasses.replace(parse_request(body, kind, "sync"), verified=True)
        observed = {"machines": _copy(list(self.machines.values())),
                    "machineUIDs": sorted(m["metadata"]["uid"] for m in self.machines.values()),
                    "fencingRequests": _copy(self.requests)}
        plan = module.decide(request, self.settings, self.now, observed)
        response = plan.response
        for action in plan.actions:
            if action.kind != "kube.mark-disrupted":
                continue
            machine = self.machines.get(action.target)
            if not fail_marks and machine is not None and machine["metadata"]["uid"] == action.params["uid"]:
                machine["metadata"]["annotations"][signals.DISRUPTION_ANNOTATION] = action.params["value"]
                self.chosen.add(action.params["uid"])
        records = (response.get("status") or {}).get("disruptions") or []
        wanted = {c["metadata"]["name"] for c in response["children"]}
        known = {c["metadata"]["name"] for c in shown}
        created = []
        for child in response["children"]:
            name = child["metadata"]["name"]
            if name in self.machines or fail_child(name):
                continue
            made = self._create(child)
            created.append(name)
            for record in records:
                if record.get("replacement") == name:
                    self.made_for[made["metadata"]["uid"]] = record["uid"]
                    self.chosen.add(record["uid"])
        let_go = []
        for name in sorted(known - wanted):
            machine = self.machines.get(name)
            if machine is None or machine["metadata"].get("deletionTimestamp"):
                continue
            let_go.append(name)
            if not fail_child(name):
                self._delete(machine)
        if not fail_status:
            self.pool["status"] = response["status"]
            self.chosen.update(r["uid"] for r in records)
        return Sync(before, previous, chosen, known, response, _copy(records), created, let_go, self.replicas)

    # -- what the pool holds -------------------------------------------------
    def replacements_of(self, uid: str, within: dict[str, dict]) -> list[dict]:
        """The Machines of ``within`` made to replace the Machine of ``uid`` (``made_for``)."""
        return [m for m in within.values() if self.made_for.get(m["metadata"]["uid"]) == uid]

    def open_records(self) -> list[dict]:
        return list((self.pool.get("status") or {}).get("disruptions") or [])

    def settle(self, *, rounds: int = 60, check: Callable[["Sync"], None] = lambda step: None) -> int:
        """Changes stop: syncs with nothing failing while every Node comes up, fencing recovers and every
        finalizer finishes, until nothing changes; the number of syncs it took. ``check`` sees each sync."""
        for done in range(1, rounds + 1):
            self.tick(30)
            state = json.dumps([self.machines, self.pool.get("status")], sort_keys=True)
            for name in list(self.machines):
                self.initialize(name)
                self.recover(name)
            check(self.sync())
            for machine in self.deleting():
                self.finish(machine["metadata"]["name"])
            if json.dumps([self.machines, self.pool.get("status")], sort_keys=True) == state:
                return done
        raise AssertionError(f"no steady state after {rounds} syncs: {sorted(self.machines)}, "
                             f"records {self.open_records()}")


# ------------------------------------------------------------------ what must hold


def _has_node(machine: dict) -> bool:
    return bool(machine["status"].get("nodeName"))


def check_sync(world: PoolWorld, step: Sync, budget: int) -> None:
    """What every sync keeps, judged on the world before it and the pool's answer (whichever write failed):

    - a Machine the pool chose to disrupt waits for the Machine made to replace it until that one is
      Initialized, or goes without one only when the pool keeps ``replicas`` Machines besides those
      being disrupted; a repaired one goes only once its FencingRequest says recovered;
    - a scale-down never takes the replacement a Machine still waits for, nor goes below ``replicas``;
    - whatever the pool starts of its own choice (a disruption, a scale-down of a Machine with a Node) leaves
      no more Machines disrupting than the budget (a count); forceful ones, and the repair of a replacement
      not yet Initialized, count but are never held.
    """
    before = step.before
    uid_of = {name: m["metadata"]["uid"] for name, m in before.items()}
    by_uid = {m["metadata"]["uid"]: m for m in before.values()}
    recorded = {r["uid"]: r for r in step.records}
    live_before = {n for n, m in before.items() if not m["metadata"].get("deletionTimestamp")}
    let_go = set(step.let_go)
    kept = (live_before - let_go) | set(step.created)
    # Disrupted: recorded in this answer, or shown chosen by a write that was not lost.
    held = {n for n in kept if uid_of.get(n) in recorded or uid_of.get(n) in world.chosen}
    counted = kept - held

    def waits_for(name: str, among: set[str]) -> bool:
        """Whether ``name`` was made to replace a Machine of ``among`` that is not being repaired."""
        old = by_uid.get(world.made_for.get(uid_of.get(name, ""), ""))
        if old is None or old["metadata"]["name"] not in among:
            return False
        record = recorded.get(old["metadata"]["uid"])
        return record is None or record["reason"] != signals.REPAIR

    for name in step.let_go:
        machine = before[name]
        record = recorded.get(machine["metadata"]["uid"])
        if machine["metadata"]["uid"] not in recorded.keys() | world.chosen:  # a scale-down
            assert not waits_for(name, kept), f"{name}, the replacement a Machine waits for, was removed"
            assert len(counted) >= step.replicas, f"{name} removed below replicas: {sorted(counted)}"
        if record is not None and record["reason"] == signals.REPAIR:
            assert world.recovered(machine), f"{name} let go before its Node's recovery"
            continue
        made = [n for n in counted if n in before and world.made_for.get(uid_of[n]) == uid_of[name]]
        if made:
            assert any(conditions.is_true(before[n]["status"], names.INITIALIZED) for n in made), \
                f"{name} let go before its replacement {made} was Initialized"
        else:
            assert len(counted) >= step.replicas, \
                f"{name} let go with no replacement, and the pool keeps only {sorted(counted)}"

    started = [r for r in step.records if r["uid"] in by_uid and r["reason"] not in signals.FORCEFUL
               and by_uid[r["uid"]]["metadata"]["name"] in live_before and r["uid"] not in step.chosen]
    exempt = [r for r in started if r["reason"] == signals.REPAIR and waits_for(r["machine"], live_before)
              and not conditions.is_true(by_uid[r["uid"]]["status"], names.INITIALIZED)]
    scaled_down = [n for n in step.let_go if uid_of[n] not in recorded.keys() | world.chosen and _has_node(before[n])]
    if len(started) > len(exempt) or scaled_down:
        deleting = [m for n, m in before.items() if (n in let_go or m["metadata"].get("deletionTimestamp"))
                    and _has_node(m)]
        disrupting = len(deleting) + len(held)
        assert disrupting - len(exempt) <= budget, \
            f"{disrupting} disrupting after starting {[r['machine'] for r in started]} and removing " \
            f"{scaled_down} within a budget of {budget}"


def check_converged(world: PoolWorld) -> None:
    """Once changes stop: ``replicas`` Machines of the pool's template, Initialized, and no open record."""
    live = world.live()
    assert not world.deleting()
    assert len(live) == world.replicas, sorted(world.machines)
    assert all(m["metadata"]["annotations"].get(names.TEMPLATE_HASH) == world.template_hash for m in live)
    assert all(world.initialized(m["metadata"]["name"]) for m in live)
    assert world.open_records() == []
