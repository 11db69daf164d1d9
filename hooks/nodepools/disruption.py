"""A NodePool's disruption pass: its methods in order, within the budgets, then each record's fate (pure).

The methods (hooks.nodepools.methods, one file each) first those whose
Machines wait for a replacement, surge-first: repair, EC2's notices,
expiry, drift; then those whose Machines leave with none: empty,
underutilized (a provisioning pool's consolidation) and scale-down (a
static pool's surplus). Each offers its candidates to the pass, which starts
each the budgets let start (hooks.nodepools.state.Pass.offer).

Between the two, every record is settled:

- Repair (its Node was fenced): the Machine leaves once the FencingRequest
  says its pods and volumes were recovered: the Node is powered off already,
  nothing waits on the replacement.
- Every other reason: surge-first, once its replacement is Initialized, so
  the new Machine is ready before the old one cordons. Its replacement is a
  live Machine naming it that is not being disrupted itself; when there is
  none (never made, deleted, or fenced before it initialized), the pool
  makes another, unless it has ``replicas`` Machines without this one: then
  it goes at once. A provisioning pool has no replicas to count: its
  disrupted Machines wait for a replacement, except a consolidated one,
  whose pods fit on the pool's other Nodes.
- Forceful signals (a spot interruption warning, the instance stopping):
  the Machine deletes itself (hooks.machines.disrupted); the pool records it
  for the count and the timing, and makes the replacement because a Machine
  being deleted is never counted.

Disrupting, for the budgets, is every Machine of the pool with a Node that is
being deleted, plus every recorded one not yet deleted (a Machine that never
had a Node disrupts nothing).
"""
from __future__ import annotations

from hooks.machines import signals
from hooks.nodepools import records
from hooks.nodepools.methods import drift, empty, expiry, interruption, repair, scale_down, underutilized
from hooks.nodepools.state import Pass, PoolState, open_pass

# Machines these methods choose wait for a replacement, surge-first.
REPLACED = (repair, interruption, expiry, drift)
# Machines these choose leave with nothing to replace them.
UNREPLACED = (empty, underutilized, scale_down)
METHODS = REPLACED + UNREPLACED


def run(state: PoolState, previous: list[dict]) -> Pass:
    """This call's pass over the pool; ``previous`` its records (``records.records_of``)."""
    progress = open_pass(state, previous)
    for method in REPLACED:
        method.run(state, progress)
    settle(state, progress)
    progress.size = records.budget_size(state.machines, progress.records)
    for method in UNREPLACED:
        method.run(state, progress)
    return progress


def settle(state: PoolState, progress: Pass) -> None:
    """Each record's fate now: its Machine leaves, waits for its replacement, or needs one made."""
    stamp = state.stamp
    held = progress.held
    counted = len(state.live) - len(held)
    replicas = state.spec.replicas
    waiting: list[tuple[int, dict]] = []
    for entry in progress.records:
        machine = state.by_uid.get(entry["uid"])
        made = records.made_for(entry, state.claims, state.live_by_name, held)
        replacement = made[0] if made else None
        if replacement is not None and records.initialized(replacement) and not entry.get("replacementReadyAt"):
            entry["replacementReadyAt"] = stamp
            progress.ready.append(entry)
        if machine is None:
            continue
        consolidated = replicas is None and entry["reason"] in signals.CONSOLIDATION
        if machine["metadata"]["deletionTimestamp"]:
            if replacement is None and not entry.get("replacementReadyAt") and not consolidated:
                waiting.append((2, entry))  # only timed: nothing waits for it
            continue
        if entry["reason"] == signals.REPAIR:
            fence = state.fenced.get(entry["uid"])
            if not state.fencing_known:
                continue  # without the FencingRequests its recovery is not known: it stays
            if fence is None or fence.recovered:  # no longer fenced by a live request: nothing to wait for
                progress.leaving.add(entry["machine"])
            elif replacement is None:
                waiting.append((1, entry))
            continue
        progress.kept.update(m["metadata"]["name"] for m in made)
        if replacement is not None:
            if records.initialized(replacement):
                progress.leaving.add(entry["machine"])
        elif replicas is not None and counted >= replicas:
            progress.leaving.add(entry["machine"])  # none needed: the pool has its replicas without it
        elif consolidated:
            progress.leaving.add(entry["machine"])  # chosen because its pods fit elsewhere: nothing replaces it
        else:
            waiting.append((0, entry))
    waiting.sort(key=lambda item: (item[0], item[1]["at"], item[1]["machine"]))
    progress.needs = [entry for _, entry in waiting]
