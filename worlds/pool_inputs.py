"""A NodePool's decision inputs for unit tests and benchmarks: a PoolState from Machines and a few spec fields, and an
empty Pass (hooks.nodepools.state)."""
from __future__ import annotations

import datetime as dt

from hooks.machines import budgets
from hooks.machines.spec import PoolSpec, ProvisioningSpec
from hooks.nodepools.methods import empty, underutilized
from hooks.nodepools.state import Pass, PoolState
from hooks.provisioning import rounds


def pool_spec(*, replicas: int | None = None, rules=budgets.DEFAULT, expire: float | None = None,
              template_hash: str = "", provisioning: ProvisioningSpec | None = None) -> PoolSpec:
    """A parsed pool with what the disruption methods read (no template: they never read it)."""
    return PoolSpec(replicas=replicas, template=None, machine_spec={}, template_hash=template_hash, budgets=rules,
                    expire_after=expire,
                    provisioning=(provisioning or ProvisioningSpec()) if replicas is None else None)


def state(machines: list[dict], spec: PoolSpec, now: dt.datetime, *, fenced=None, name: str = "web",
          uid: str = "uid-pool", known=None, provisioned=None, consolidation=()) -> PoolState:
    """The pool as one call reads it; every Machine shown by Metacontroller unless ``known`` says which."""
    return PoolState(name=name, uid=uid, spec=spec, machines=machines,
                     known=frozenset(m["metadata"]["name"] for m in machines) if known is None else frozenset(known),
                     fenced=fenced or {}, now=now, provisioned=provisioned, consolidation=tuple(consolidation))


def empty_pass(*, held=(), leaving=(), size: int = 0, disrupting: int = 0) -> Pass:
    return Pass(records=[], held=set(held), awaited=set(), size=size, disrupting=disrupting, leaving=set(leaving))


def consolidated(machines: list[dict], nodes: list[dict], bound: list[dict], *, name: str, now: dt.datetime,
                 policy: ProvisioningSpec = ProvisioningSpec(), rules=budgets.DEFAULT, previous=(), placed=(),
                 launching: int = 0, held=(), disrupting: int = 0, disruption_budgets=()) -> tuple[PoolState, Pass]:
    """The consolidation methods' part of one pass over a provisioning pool whose round placed pending pods
    on ``placed`` and launches Machines for ``launching`` of them; ``bound`` the pods on ``nodes``."""
    readings = rounds.Readings(pending=[], bound=list(bound), nodes=nodes, machines=machines, pools=[],
                               daemonsets=[], catalog=[], disruption_budgets=list(disruption_budgets))
    provisioned = rounds.Round(True, 0.0, status={"pendingPods": launching}, placed_slots=set(placed),
                               readings=readings)
    pool = state(machines, pool_spec(rules=rules, provisioning=policy), now, name=name, provisioned=provisioned,
                 consolidation=previous)
    progress = empty_pass(held=held, size=len(machines), disrupting=disrupting)
    empty.run(pool, progress)
    underutilized.run(pool, progress)
    return pool, progress
