"""The storm guard: when too many of a policy's nodes look dead at once, fence none.

A network partition or an API server outage makes healthy nodes look exactly
like dead ones, many at a time. Fencing them would turn a blip into an outage,
so no new fencing starts while more than ``maxUnhealthy`` of a policy's nodes
are unhealthy.

The count never carries the healthy nodes. It rests on two readings:

- **The count list**: the Nodes the policy selects, read from the API
  server as a Table (hooks/kube/nodes.py: a name and a Ready column per
  node), at most once per count interval, plus once before an unhealthy node
  falls due (below). It gives the total, and every node that was not Ready
  at that moment. Its time is ``countedAt``.
- **The recorded nodes**: node-fencing keeps an UnhealthyNode record of a
  node (hooks/fencing/records.py: its conditions and the labels policies
  select on) while it is not Ready or an unhealthy condition of a policy
  selecting it holds, and the policy controller relates only those records,
  so the nodes are judged by the policy's own rules on every change.

A node counts as unhealthy when the policy's rules say so about its record,
or when the last count list saw it not Ready, whatever its record says: a
record may add to the count, never take from it a node the API server's list
showed not Ready (a stale record, or one saying Ready, must not hide a dead
node). Any evidence counts, so the guard may hold early, never late.

The one reading that gives way is a record's Ready condition, to a count list
that is the newer of the two: taken at least ``MAX_SKEW_SECONDS`` after that
condition last changed, and not finding the node not Ready. Both are the API
server's; the record only waits for its node's next sync, and after a storm
that sync waits behind every other recovering Node in Metacontroller's queue,
so the guard would release only as the queue drains. A node only a list
finds Ready again is never admitted on its record either. While the guard
holds, the policy lists as often as lists may be taken, so it releases on the
first list that finds few enough nodes not Ready.

Fencing may start only for a node the count admits (``unhealthyNodeNames``):
recorded, unhealthy by the policy's rules, and seen by a count list taken
after it turned unhealthy and at most ``ADMIT_WITHIN_SECONDS`` before it fell
due. So a node is fenced on a count that saw the cluster as it was just
before the node's duration ran out, however slowly the records followed. The
policy controller lists again ``LIST_LEAD_SECONDS`` before a node falls due
for that.

The node-fencing hook reads the verdict from the policy's status, and
proceeds only when that status was computed for the current spec, already
admits this node, and its count list is recent (``countedAt``, at most
NODEWARDEN_FENCING_COUNT_MAX_AGE_SECONDS old and not from the future), so a
stale, frozen or missing count never lets fencing through: a policy sync
that stopped (its hook failing, its list refused) holds fencing instead of
trusting its last answer.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks import conditions, fencing_names, timefmt
from hooks.fencing import health
from hooks.fencing.health import Health
from hooks.fencing.policy import Policy

ALLOWED = "allowed"
HOLD = "hold"
PENDING = "pending"
# How far ahead of this clock a count's countedAt may be (clocks of two hook replicas).
MAX_SKEW_SECONDS = 10.0
# A node is admitted only on a count list taken at most this long before it falls due.
ADMIT_WITHIN_SECONDS = 10.0
# The policy lists this long before a node falls due, so the count is written before it is needed.
LIST_LEAD_SECONDS = 5.0
# Lists taken for nodes falling due are at least this far apart (a storm brings many at once).
MIN_LIST_GAP_SECONDS = 5.0


@dataclass(frozen=True)
class Listing:
    """The last count list: when it was taken, the nodes it found, and the ones not Ready."""

    at: dt.datetime
    total: int
    not_ready: tuple[str, ...] | None  # their names; None when the status kept only their number
    not_ready_count: int


def listing_of(found: dict, at: dt.datetime) -> Listing:
    """A Listing from a count list (hooks/kube/nodes.py) taken at ``at``."""
    not_ready = tuple(sorted(set(found["notReady"])))
    return Listing(at, found["total"], not_ready, len(not_ready))


def listing_in(policy: Policy, now: dt.datetime) -> Listing | None:
    """The Listing the policy's status records, if it was made for this spec and reads cleanly."""
    status = policy.status or {}
    at = timefmt.parse(status.get("countedAt"))
    total = status.get("observedNodes")
    count = status.get("notReadyNodes")
    listed = status.get("notReadyNodeNames")
    if at is None or status.get("observedGeneration") != policy.generation or \
            (at - now).total_seconds() > MAX_SKEW_SECONDS:
        return None
    if not _whole(total) or not _whole(count):
        return None
    if listed is not None and not (isinstance(listed, list) and all(isinstance(n, str) for n in listed)):
        return None
    return Listing(at, total, tuple(listed) if listed is not None else None, count)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class Counts:
    listed_at: dt.datetime  # the count list's time: countedAt
    observed: int
    unhealthy: int
    fencing: int
    fenced: int
    allowed: int
    unhealthy_names: tuple[str, ...]  # the admitted ones: unhealthy, recorded, seen by a recent enough list
    not_ready: tuple[str, ...] | None  # the last list's, to keep in the status; None beyond what the policy allows
    not_ready_count: int

    @property
    def holds(self) -> bool:
        return self.unhealthy > self.allowed


@dataclass(frozen=True)
class Judged:
    """The recorded nodes a policy selects, and the unhealthy ones among them by its rules, at one moment."""

    selected: tuple[str, ...]
    unhealthy: dict[str, Health]
    fencing: int
    fenced: int


def judge(policy: Policy, recorded: list[dict], now: dt.datetime, listing: Listing | None = None) -> Judged:
    """Judge the records once per call; the count and the next list's time both read the result. A record's
    Ready gives way to ``listing``'s when that list is the newer reading (_as_listed)."""
    selected, unhealthy, fencing, fenced = [], {}, 0, 0
    for node in recorded:
        if not policy.selects(node["metadata"].get("labels") or {}):
            continue
        name = node["metadata"]["name"]
        status = _as_listed(name, node.get("status") or {}, listing)
        selected.append(name)
        state = health.assess(status, policy.rules, now)
        if state.unhealthy:
            unhealthy[name] = state
        fencing += conditions.is_true(status, fencing_names.REQUIRED)
        fenced += conditions.is_true(status, fencing_names.COMPLETE)
    return Judged(tuple(selected), unhealthy, fencing, fenced)


def _as_listed(name: str, status: dict, listing: Listing | None) -> dict:
    """The record's status, with Ready as ``listing`` saw it when that list is the newer reading: it kept the
    names of the nodes it found not Ready, this node is not among them, and it was taken at least
    MAX_SKEW_SECONDS after the record's Ready last changed (so no clock difference can put it before)."""
    if listing is None or listing.not_ready is None or name in listing.not_ready:
        return status
    ready = conditions.find(status, "Ready")
    changed = timefmt.parse(ready.get("lastTransitionTime")) if ready else None
    if ready is None or ready.get("status") == "True" or changed is None \
            or (listing.at - changed).total_seconds() < MAX_SKEW_SECONDS:
        return status
    kept = [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") != "Ready"]
    listed = {"type": "Ready", "status": "True", "lastTransitionTime": timefmt.fmt(listing.at)}
    return dict(status, conditions=[*kept, listed])


def admits(listed_at: dt.datetime, state: Health) -> bool:
    """Whether a count list taken at ``listed_at`` saw the cluster late enough to fence this node on."""
    return listed_at >= max(state.since, state.due_at - dt.timedelta(seconds=ADMIT_WITHIN_SECONDS))


def count(policy: Policy, judged: Judged, listing: Listing) -> Counts:
    """Count the policy's nodes by health: the nodes its rules find unhealthy on their records, and every node
    the last list saw not Ready, each once; a record adds to what the list shows, never takes from it."""
    allowed = policy.allowed_unhealthy(listing.total)
    if listing.not_ready is not None:
        unhealthy = len(set(judged.unhealthy) | set(listing.not_ready))
    else:
        # Only their number was kept, more than the policy allows: the guard holds on it whatever the records say.
        unhealthy = max(len(judged.unhealthy), listing.not_ready_count)
    kept = listing.not_ready if listing.not_ready is not None and len(listing.not_ready) <= allowed else None
    return Counts(
        listed_at=listing.at,
        observed=listing.total,
        unhealthy=unhealthy,
        fencing=judged.fencing,
        fenced=judged.fenced,
        allowed=allowed,
        unhealthy_names=tuple(sorted(n for n, state in judged.unhealthy.items() if admits(listing.at, state))),
        not_ready=kept,
        not_ready_count=listing.not_ready_count,
    )


def next_list(judged: Judged, listing: Listing | None, now: dt.datetime, interval: float,
              holding: bool = False) -> float:
    """Seconds until the policy should list its nodes again; 0 means now.

    Every ``interval`` (so ``countedAt`` never ages out while the controller
    runs), every ``MIN_LIST_GAP_SECONDS`` while the guard is ``holding`` (it
    releases on the first list that finds few enough nodes not Ready), and
    ``LIST_LEAD_SECONDS`` before an unhealthy node the last list
    does not admit falls due, but not sooner than ``MIN_LIST_GAP_SECONDS``
    after the last list. Also that soon when a node the last list saw not
    Ready has a record that finds it healthy now (it counts until a list no
    longer shows it), and when the status kept only the number of the nodes
    the last list saw not Ready and records have come since (the count is
    then only as exact as that number allows).
    """
    if listing is None:
        return 0.0
    due = listing.at + dt.timedelta(seconds=interval)
    gap = listing.at + dt.timedelta(seconds=MIN_LIST_GAP_SECONDS)
    if holding or (listing.not_ready is None and judged.selected):
        due = min(due, gap)
    elif listing.not_ready and set(listing.not_ready) & (set(judged.selected) - set(judged.unhealthy)):
        due = min(due, gap)
    for state in judged.unhealthy.values():
        if not admits(listing.at, state):
            wanted = max(state.since, state.due_at - dt.timedelta(seconds=LIST_LEAD_SECONDS), gap)
            due = min(due, wanted)
    return max(0.0, (due - now).total_seconds())


@dataclass(frozen=True)
class Verdict:
    outcome: str  # ALLOWED, HOLD or PENDING
    message: str


def verdict(policy: Policy, node_name: str, now: dt.datetime, max_age: float) -> Verdict:
    """May fencing of ``node_name`` start, by the policy's last count?"""
    judged = count_verdict(policy, now, max_age)
    if judged.outcome != ALLOWED:
        return judged
    names_counted = (policy.status or {}).get("unhealthyNodeNames")
    if not isinstance(names_counted, list) or node_name not in names_counted:
        return Verdict(PENDING, f"NodeFencingPolicy {policy.name} has not counted this node as unhealthy yet")
    return Verdict(ALLOWED, "")


def count_verdict(policy: Policy, now: dt.datetime, max_age: float) -> Verdict:
    """Whether the policy's last count lets anything new start: counted for this spec, recently, and the
    storm guard not holding (a node's own admission aside)."""
    status = policy.status or {}
    guard = conditions.find(status, fencing_names.STORM_GUARD)
    if guard is None or status.get("observedGeneration") != policy.generation:
        return Verdict(PENDING, f"NodeFencingPolicy {policy.name} has not counted its nodes for this spec yet")
    counted = timefmt.parse(status.get("countedAt"))
    age = (now - counted).total_seconds() if counted else None
    if age is None or age < -MAX_SKEW_SECONDS or age > max_age:
        # A stamp from the future would stay "fresh" long after its sync stopped: not trusted either.
        # A fixed message: the age changes every second and would rewrite the node each time.
        return Verdict(PENDING, f"the last count of NodeFencingPolicy {policy.name} is missing, from the future "
                                f"or older than {max_age:g}s: no fencing on a count that may be out of date")
    if guard.get("status") == "True":
        # A fixed message: counts change often in a storm, and every change would rewrite every held node.
        return Verdict(HOLD, f"the storm guard of NodeFencingPolicy {policy.name} holds new fencing: more than "
                             f"{policy.max_unhealthy} of its nodes are unhealthy (see its status)")
    return Verdict(ALLOWED, "")


def flagged(policies: list[Policy], node_labels: dict, node_status: dict, now: dt.datetime) -> bool:
    """Whether the node should have its UnhealthyNode record: some policy selects it, and it is not
    Ready or an unhealthy condition of one of those policies holds (however recently).

    Per-policy rules differ, so the record says "some policy may count this
    node"; each policy then judges the record by its own rules. Not Ready
    alone makes one too, so that a node the count list saw not Ready is
    recorded and judged exactly, instead of counted on the list's word until
    the next list.
    """
    selecting = [p for p in policies if p.selects(node_labels)]
    if not selecting:
        return False
    if not health.is_ready(node_status):
        return True
    return any(health.assess(node_status, p.rules, now).unhealthy for p in selecting)
