"""What each replacement of this call is made as (pure).

A static pool's replacement is its template now. A provisioning pool's is
planned from the pool as it is now (its requirements, template and subnets)
for the pods the old Machine runs: the claim the scheduler makes for them
alone (hooks.provisioning.rounds.replacement), so a change of requirements
or subnets takes effect with the replacement. A Machine that runs no pod
that would move (DaemonSet and static pods go with their Node) needs no
replacement: it leaves now (a repaired one once its Node's recovery is
done, as always), and the round provisions for whatever is pending.
When the pool as it is now cannot run its pods at all, the replacement keeps
the old Machine's instance types, capacity type and subnets (with the
template now), so its pods keep running, and a Warning says so. A
provisioning pool that has no round readings in this call makes its
replacements on the next call that has.
"""
from __future__ import annotations

from hooks import events
from hooks.machines import signals
from hooks.events import Event
from hooks.nodepools import consolidation, records
from hooks.nodepools.state import Pass, PoolState
from hooks.provisioning import rounds

# What a provisioning pool's fallback replacement keeps of the Machine it replaces: its size and place.
_SIZED = ("instanceTypes", "capacityType", "subnets", "subnetSelector")


def plan(state: PoolState, progress: Pass, said: list[Event]) -> list[tuple[dict | None, dict]]:
    """(spec, annotations) of each replacement this call makes, in the order of ``progress.needs``, which
    keeps only the records they are made for; a spec of None is the pool's template."""
    if not state.provisioning:
        return [(None, records.replaces(entry)) for entry in progress.needs]
    if state.provisioned is None:
        progress.needs = []
        return []
    made, kept = [], []
    for entry in progress.needs:
        machine = state.by_uid.get(entry["uid"])
        moving = consolidation.moving_from(machine, state) if machine is not None else []
        if not moving:
            if machine is not None and not machine["metadata"]["deletionTimestamp"] \
                    and entry["reason"] != signals.REPAIR:
                progress.leaving.add(entry["machine"])  # nothing runs there that needs a new Machine
            continue  # a repaired Machine still waits for its Node's recovery: it never goes before that
        planned = rounds.replacement(state.spec, state.provisioned, moving, state.now)
        if planned is None:
            planned = _like(machine, state)
            said.append(events.warning(events.FAILED_PROVISIONING, (
                f"Machine {entry['machine']} ({entry['reason']}): the pool as it is now cannot run its "
                f"{len(moving)} pods; replaced with its own instance types and subnets")))
        made.append((planned, records.replaces(entry)))
        kept.append(entry)
    progress.needs = kept
    return made


def _like(machine: dict, state: PoolState) -> dict:
    """The pool's template now, with the Machine's instance types, capacity type and subnets."""
    made = {k: v for k, v in state.spec.machine_spec.items() if k not in _SIZED}
    made.update({k: machine["spec"][k] for k in _SIZED if machine["spec"].get(k) not in (None, [], {}, "")})
    return made
