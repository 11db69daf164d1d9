"""A provisioning pool's part of this call: its round over the readings gather made (pure).

The round itself (where pending pods go, which Machines to create) is
hooks.provisioning.rounds: every provisioning pool computes the same
placement over the same readings and keeps only its own claims.
"""
from __future__ import annotations

import datetime as dt

from hooks import events
from hooks.config import Settings
from hooks.events import Event
from hooks.machines.spec import PoolSpec
from hooks.nodepools.state import PoolState
from hooks.provisioning import inputs, rounds
from hooks.provisioning.resources import ZERO


def round_of(name: str, pool_spec: PoolSpec, observed: dict, settings: Settings, now: dt.datetime,
             said: list[Event]) -> rounds.Round | None:
    """This call's round, when the pool provisions and gather read for one (a Round that is not ready says
    when to look again); None for a static pool."""
    if pool_spec.provisioning is None:
        return None
    if "provisioningError" in observed:
        said.append(events.warning(events.FAILED_PROVISIONING, f"provisioning round: {observed['provisioningError']}"))
        return rounds.Round(False, settings.error_backoff_seconds)
    if not isinstance(observed.get("provisioning"), dict):
        return rounds.Round(False, 0.0)
    out = rounds.provision(name, pool_spec, rounds.readings(observed["provisioning"]), now,
                           idle=settings.batch_idle_seconds, maximum=settings.batch_max_seconds)
    said.extend(out.events)
    return out


def within_limits(state: PoolState, provisioned: rounds.Round, needs: list[dict],
                  made: list[tuple[dict | None, dict]]) -> rounds.Round:
    """The round's claims the limits still leave room for besides this call's replacements (``needs``, made
    as ``made`` says, in order). A replacement for a Machine the limits still count (it waits, live, for the
    replacement to initialize) takes the room that Machine holds; one for a Machine they no longer count
    (being deleted: a spot warning, a stop) is new capacity, counted here."""
    if provisioned.view is None or provisioned.readings is None:
        return provisioned
    catalog = {o.name: o for o in provisioned.readings.catalog}
    counted = {m["metadata"]["uid"] for m in state.live if not inputs.out_of_capacity(m)}
    reserved, machines = ZERO, 0
    for entry, (machine_spec, _) in zip(needs, made):
        if entry["uid"] in counted:
            continue
        old = state.by_uid.get(entry["uid"])
        planned = {"spec": machine_spec if machine_spec is not None else (old or {}).get("spec") or {}, "status": {}}
        reserved += inputs.machine_capacity(planned, catalog)
        machines += 1
    return rounds.within(provisioned, reserved, machines)
