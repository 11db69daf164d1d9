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
from hooks.provisioning import rounds


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
