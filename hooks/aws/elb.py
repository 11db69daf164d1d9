"""ELBv2 target groups and classic ELBs: register, deregister, target state.

Every function is idempotent and makes one call per load balancer (batched
by 200 targets), never one call per target.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from botocore.exceptions import ClientError

from hooks.aws import rate_limits
from hooks.aws.clients import error_code
from hooks.target_states import REGISTERED, UNREAD

log = logging.getLogger(__name__)

BATCH = 200
# The load balancer or target group itself no longer exists: whatever we
# wanted from it (out, drained) is true, and there is nothing to rejoin.
GONE_CODES = ("TargetGroupNotFound", "LoadBalancerNotFound")
# What register/deregister report when the load balancer was already gone.
GONE = "gone"
# How long a call sent here can take to land at AWS: longer than botocore's worst case for one call (3
# attempts of 2 s connect + 5 s read, and backoff); its token was taken before it was sent and a retry waits
# for none (rate_limits.paid_ahead), so the limiter adds nothing. A ticket gives up waiting for it then.
CALL_SECONDS = 30.0


class NotSent(Exception):
    """A (de)registration whose deadline to go out passed before it could: not sent at all."""

    @classmethod
    def no_token(cls, what: str, limited: ClientError) -> NotSent:
        """``what`` not sent: the limiter's token would have come after its deadline (``limited``)."""
        return cls(f"{what}: no token before its deadline to go out: {limited.response['Error']['Message']}")


class Queued(Exception):
    """A deregistration whose call waits to go out (its token, or another call of its group): still under way."""


def _chunks(items: list, size: int = BATCH):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _targets(instance_id: str, ports: list[int]) -> list[dict]:
    return [{"Id": instance_id, "Port": port} for port in sorted(set(ports))]


def _gone(exc: ClientError) -> bool:
    return error_code(exc) in GONE_CODES


def _unless_gone(call, forgiven: tuple[str, ...] = (), **params) -> str | None:
    """One call; GONE when its load balancer no longer exists, None when done or ``forgiven``."""
    try:
        call(**params)
    except ClientError as exc:
        if _gone(exc):
            return GONE
        if error_code(exc) not in forgiven:
            raise
    return None


def deregister_targets(elbv2, target_group_arn: str, instance_id: str, ports: list[int]) -> str | None:
    """Out of the target group; GONE when the group no longer exists (out all the same).

    AWS answers success for an absent target; some implementations say
    InvalidTarget instead. Either way the target is not registered.
    """
    for batch in _chunks(_targets(instance_id, ports)):
        if _unless_gone(elbv2.deregister_targets, ("InvalidTarget",), TargetGroupArn=target_group_arn,
                        Targets=batch) == GONE:
            return GONE
    return None


def register_targets(elbv2, target_group_arn: str, instance_id: str, ports: list[int]) -> str | None:
    """Back into the target group; GONE when it no longer exists (nothing to rejoin)."""
    for batch in _chunks(_targets(instance_id, ports)):
        if _unless_gone(elbv2.register_targets, TargetGroupArn=target_group_arn, Targets=batch) == GONE:
            return GONE
    return None


def deregister_instance(elb, load_balancer_name: str, instance_id: str) -> str | None:
    return _unless_gone(elb.deregister_instances_from_load_balancer, LoadBalancerName=load_balancer_name,
                        Instances=[{"InstanceId": instance_id}])


def register_instance(elb, load_balancer_name: str, instance_id: str) -> str | None:
    return _unless_gone(elb.register_instances_with_load_balancer, LoadBalancerName=load_balancer_name,
                        Instances=[{"InstanceId": instance_id}])


def _described_states(described: list) -> dict[tuple[str, int], str]:
    states = {}
    for desc in described:
        target = desc.get("Target", {})
        if isinstance(target.get("Id"), str) and isinstance(target.get("Port"), int):
            states[(target["Id"], target["Port"])] = desc.get("TargetHealth", {}).get("State", "unused")
    return states


def group_states(elbv2, target_group_arn: str) -> dict[tuple[str, int], str]:
    """Every target of a group and its state, in one call; {} when the group is gone."""
    try:
        described = elbv2.describe_target_health(TargetGroupArn=target_group_arn)["TargetHealthDescriptions"]
    except ClientError as exc:
        if _gone(exc):
            return {}  # no group left to drain from
        raise
    return _described_states(described)


def target_states(elbv2, target_group_arn: str, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """The state of each ``wanted`` (instance, port) of a group, in one call.

    Up to BATCH targets are asked for by name: the answer is a few entries
    instead of every target of the group (a group may hold a thousand). A
    target the answer leaves out is left out here too (not read, so it waits
    longer), while one the group does not hold is 'unused' (AWS answers
    Target.NotRegistered for it). AWS refuses the whole call with
    InvalidTarget when one named instance no longer exists, so that, and more
    than BATCH targets, reads the whole group instead. A group that is gone
    holds nothing: every target is 'unused'.
    """
    if len(wanted) <= BATCH:
        try:
            described = elbv2.describe_target_health(
                TargetGroupArn=target_group_arn,
                Targets=[{"Id": instance_id, "Port": port} for instance_id, port in wanted])["TargetHealthDescriptions"]
            named = set(wanted)
            return {t: state for t, state in _described_states(described).items() if t in named}
        except ClientError as exc:
            if _gone(exc):
                return {t: "unused" for t in wanted}
            if error_code(exc) != "InvalidTarget":
                raise
    whole = group_states(elbv2, target_group_arn)
    return {t: whole.get(t, "unused") for t in wanted}


def instance_states(elb, load_balancer_name: str, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """Whether each ``wanted`` instance (port 0: a classic ELB has none per instance) is registered with the
    classic ELB, in one call: REGISTERED or 'unused'. A classic ELB stops sending to an instance as it is
    deregistered, so its list of instances is what matters, not their health. A load balancer that is gone
    holds nothing."""
    try:
        described = elb.describe_load_balancers(LoadBalancerNames=[load_balancer_name])["LoadBalancerDescriptions"]
    except ClientError as exc:
        if _gone(exc):
            return {t: "unused" for t in wanted}
        raise
    registered = {i.get("InstanceId") for lb in described for i in lb.get("Instances") or []}
    return {t: REGISTERED if t[0] in registered else "unused" for t in wanted}


class HealthBoard:
    """Target states per target group (or classic ELB), read once for every node draining from it.

    When hundreds of nodes leave at once, each would otherwise ask about its
    own targets in every group it was in: calls grow with nodes times groups.
    Here a group is read at most once per ``max_age`` seconds, and that one
    read (``read``: DescribeTargetHealth, or DescribeLoadBalancers for a
    classic ELB) names the targets of every node that asked about the group
    within ``WANTED_SECONDS``, so the calls grow with the groups alone and
    each answer holds the draining nodes' targets, not the whole group. A
    node whose targets the last reading did not name is answered UNREAD
    until the next one does (at most ``max_age`` later).

    A caller is answered only from readings that began at or after its
    ``not_before`` (when its detach began) and ``after`` (when given), and
    after its first ask about the target since ``not_before``: a node asks
    only once its deregistrations are recorded, so no reading it is answered
    from can predate them, and a target it reads registered was registered
    again since (a reading kept for a target asked about in an earlier
    detach is not used). Times are the caller's ``clock``.

    One group is read at a time per process, and a caller that finds a read
    under way does not wait for it: it is answered from the latest reading
    it may use, older than ``max_age`` or none (UNREAD). Either only makes it
    wait longer, never stop early (a target out of a group stays out while
    its node is detached). So a read under way holds one hook thread, not
    every caller's, and the rate of reads is bounded by how fast the API
    answers them.
    """

    # A target nobody asked about for this long is no longer read (its node has drained or gone).
    WANTED_SECONDS = 60.0

    def __init__(self):
        self._lock = threading.Lock()
        self._reader = threading.Lock()
        self._read_at: dict[tuple[str, str], float] = {}  # group -> when its last reading began
        self._readings: dict[tuple[str, str], dict[tuple[str, int], tuple[float, str]]] = {}
        self._wanted: dict[tuple[str, str], dict[tuple[str, int], float]] = {}  # group -> target -> last asked
        self._first_asked: dict[tuple[str, str], dict[tuple[str, int], float]] = {}  # since the caller's not_before

    def states(self, client, region: str, group: str, instance_id: str, ports: list[int], *,
               max_age: float, not_before: float, may_read: bool = True, after: float | None = None,
               clock=time.time, read=target_states) -> dict[int, str]:
        key = (region, group)
        mine = [(instance_id, port) for port in ports]
        since = max(not_before, after if after is not None else not_before)
        first = self._want(key, mine, not_before, clock())
        if self._read_due(key, max_age, since, clock()) and may_read and self._reader.acquire(blocking=False):
            try:
                if self._read_due(key, max_age, since, clock()):  # another thread may have just read it
                    began = clock()
                    wanted = self._wanted_now(key, mine)
                    found = read(client, group, wanted)
                    with self._lock:
                        self._read_at[key] = began
                        readings = self._readings.setdefault(key, {})
                        for target in wanted:
                            readings.pop(target, None)  # a target this reading left out is unread again
                        readings.update({target: (began, state) for target, state in found.items()})
            finally:
                self._reader.release()
        found = self._usable(key, {t: max(since, first[t]) for t in mine})
        return {port: found.get((instance_id, port), UNREAD) for port in ports}

    def _want(self, key, mine: list[tuple[str, int]], not_before: float, now: float) -> dict[tuple[str, int], float]:
        """Note that the caller asked about its targets; when it first did since ``not_before``, per target."""
        asked = time.monotonic()
        with self._lock:
            wanted = self._wanted.setdefault(key, {})
            wanted.update((target, asked) for target in mine)
            first = self._first_asked.setdefault(key, {})
            for target in mine:
                if first.get(target, float("-inf")) < not_before:
                    first[target] = now
            return {target: first[target] for target in mine}

    def _wanted_now(self, key, mine: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The caller's targets and the group's others asked about lately; the rest are forgotten, and their
        readings with them."""
        since = time.monotonic() - self.WANTED_SECONDS
        with self._lock:
            wanted = {t: at for t, at in self._wanted.get(key, {}).items() if at >= since or t in mine}
            self._wanted[key] = wanted
            for kept in (self._readings.get(key, {}), self._first_asked.get(key, {})):
                for target in [t for t in kept if t not in wanted]:
                    del kept[target]
            return sorted(wanted)

    def _read_due(self, key, max_age: float, not_before: float, now: float) -> bool:
        """Whether the group's last reading is older than ``max_age`` or began before ``not_before``. While it
        is not, a caller it did not name waits for the next one: reads stay one per group per max_age."""
        with self._lock:
            read_at = self._read_at.get(key)
        return read_at is None or read_at < not_before or now - read_at > max_age

    def _usable(self, key, since: dict[tuple[str, int], float]) -> dict:
        """The caller's targets that have a reading begun at or after their own time in ``since``: target -> state."""
        with self._lock:
            readings = self._readings.get(key, {})
            return {t: readings[t][1] for t, at in since.items() if t in readings and readings[t][0] >= at}

    def clear(self) -> None:
        with self._lock:
            self._readings.clear()
            self._read_at.clear()
            self._wanted.clear()
            self._first_asked.clear()


HEALTH = HealthBoard()


class _Batch:
    """The targets callers asked to deregister from one group, sent together in one call."""

    def __init__(self):
        self.parts: list[list[dict]] = []  # one list of targets per caller
        self.send_by: list[float | None] = []  # per part: the monotonic time after which it is not sent
        self.done = threading.Event()
        self.results: list = []  # per part: None, GONE, or the exception it failed with
        # Set once it is done, or once its call waits for more than its turn: for another call of the group
        # to end, or for a token that is not there.
        self.moved = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()

    def when_done(self, then: Callable[[], None]) -> None:
        with self._callbacks_lock:
            if not self.done.is_set():
                self._callbacks.append(then)
                return
        then()

    def answered(self) -> None:
        """Done: every waiter and every callback is told."""
        with self._callbacks_lock:
            self.done.set()
            callbacks, self._callbacks = self._callbacks, []
        self.moved.set()
        for then in callbacks:
            try:
                then()
            except Exception:  # noqa: BLE001 - one callback's failure is not the call's
                log.exception("a deregistration's callback failed")

    @property
    def size(self) -> int:
        return sum(len(part) for part in self.parts)


class Ticket:
    """One caller's part of a batch: called, it waits for the batch's call and answers for the part.

    ``queued``: the process's share of the bucket had no token for a call when the part joined, so the
    answer may be seconds away. ``renewal``: the part was already waiting, asked again by a later reading of
    the Node (its deadline to go out moved to that reading's); whoever asked first waits for it.
    """

    def __init__(self, coalescer: DeregisterCoalescer, batch: _Batch, index: int, target_group_arn: str,
                 renewal: bool, queued: bool):
        self._coalescer, self._batch, self._index, self._arn = coalescer, batch, index, target_group_arn
        self.renewal, self.queued = renewal, queued

    def __call__(self) -> str | None:
        return self._coalescer._answer(self._batch, self._index, self._arn)

    def when_done(self, then: Callable[[], None]) -> None:
        """``then()`` once the batch has answered (at once if it has), on the thread that answered it."""
        self._batch.when_done(then)

    def unless_queued(self) -> str | None:
        """The answer, as a call gives it, unless the batch's call comes to wait for another call of the
        group or for its token first: then Queued (the ticket still answers later)."""
        self._batch.moved.wait(self._coalescer.TICKET_DEADLINE_SECONDS)
        if not self._batch.done.is_set():
            raise Queued(f"DeregisterTargets on {self._arn}: waiting to go out")
        return self()


class DeregisterCoalescer:
    """DeregisterTargets per target group, coalesced across the nodes a process deregisters at once.

    A group nobody deregistered from within ``window`` seconds gets its call
    at once: one node leaving waits for nothing but its own call. Otherwise
    the caller joins the batch that goes out ``window`` after the group's
    last call (or as soon as that call has returned, if later), so a group
    gets at most one call per window per process, carrying every node that
    asked meanwhile, as the AWS Load Balancer Controller batches per target
    group.

    ``submit`` hands one node's targets in one group over and returns at once
    with a ticket; a node leaving many groups submits them all before it
    waits on any ticket, so its groups are called in parallel and the nodes
    leaving with it meet it in every group. Each ticket answers only once the
    call carrying its own targets has answered, so a node's record of a
    deregistration is written only after its own targets left. A call that
    fails fails every caller in it (each retries on its next sync); one that
    names a target AWS does not know (InvalidTarget) is followed by one read
    of the group: a caller none of whose targets it holds is out, the rest go
    out again together, so no caller is told its targets left on another's
    account and a wave's call does not become a call per node. A batch takes
    at most BATCH targets: its call is paid for by one token. Every
    wait ends: a ticket gives up after ``TICKET_DEADLINE_SECONDS`` (the call
    itself goes on; deregistering again is harmless). A caller may give its
    targets a deadline to go out (``send_within``): if the group's turn comes
    later, they are left out of the call and the ticket raises NotSent, so no
    deregistration goes out long after the reading of the Node it rests on.
    The leader waits for the call's token from the process's limiter
    (rate_limits.paid_ahead) before it takes the batch, so the callers who
    ask meanwhile go out in the same call, and the deadlines are checked with
    the token in hand: waiting for it never carries a call past them; no
    token before the last deadline is NotSent for every part. The same
    targets asked for again while their part waits join that part, its
    deadline moved to the later asking's, so a node asking on each sync
    keeps its place instead of piling duplicates into the call.
    """

    TICKET_DEADLINE_SECONDS = CALL_SECONDS

    def __init__(self, window: float = 0.02, clock: Callable[[], float] = time.monotonic):
        self.window = window
        self._clock = clock  # what the parts' deadlines to go out are kept on
        self._lock = threading.Lock()
        self._last: dict[tuple, float] = {}  # group -> when its last call went out (monotonic)
        self._busy: set[tuple] = set()  # groups with a call in flight
        self._pending: dict[tuple, list[_Batch]] = {}  # group -> the batches callers are joining, in order

    def deregister(self, elbv2, region: str, target_group_arn: str, instance_id: str, ports: list[int],
                   window: float | None = None, send_within: float | None = None) -> str | None:
        """Out of the target group; GONE when the group no longer exists (out all the same)."""
        return self.submit(elbv2, region, target_group_arn, instance_id, ports, window, send_within)()

    def submit(self, elbv2, region: str, target_group_arn: str, instance_id: str, ports: list[int],
               window: float | None = None, send_within: float | None = None):
        """Join the group's next call; the returned ticket waits for it and answers as ``deregister`` does.
        ``send_within``: seconds from now after which these targets are no longer sent (NotSent)."""
        window = self.window if window is None else window
        key = (region, target_group_arn)
        targets = _targets(instance_id, ports)
        if send_within is not None and send_within <= 0:
            raise NotSent(f"DeregisterTargets on {target_group_arn}: its deadline to go out had passed")
        send_by = None if send_within is None else self._clock() + send_within
        with self._lock:
            batches = self._pending.setdefault(key, [])
            batch, index = next(((b, b.parts.index(targets)) for b in batches if targets in b.parts), (None, None))
            renewal = batch is not None
            if renewal:
                old = batch.send_by[index]
                batch.send_by[index] = None if old is None or send_by is None else max(old, send_by)
            lead = False
            if not renewal:
                batch = batches[-1] if batches and batches[-1].size + len(targets) <= BATCH else None
                lead = batch is None
                if lead:  # none yet, or the last is full: one call carries BATCH targets, on one token
                    batch = _Batch()
                    batches.append(batch)
                index = len(batch.parts)
                batch.parts.append(targets)
                batch.send_by.append(send_by)
        if lead:  # the batch's call is made off the caller's thread, so one caller can lead many groups
            threading.Thread(target=self._send, args=(elbv2, key, batch, window), daemon=True,
                             name="deregister").start()
        return Ticket(self, batch, index, target_group_arn, renewal,
                      queued=not rate_limits.ready(elbv2, "DeregisterTargets"))

    def _answer(self, batch: _Batch, index: int, target_group_arn: str) -> str | None:
        if not batch.done.wait(self.TICKET_DEADLINE_SECONDS):
            raise TimeoutError(f"DeregisterTargets on {target_group_arn} did not answer within "
                               f"{self.TICKET_DEADLINE_SECONDS:g}s")
        result = batch.results[index]
        if isinstance(result, BaseException):
            raise result
        return result

    def _send(self, elbv2, key: tuple, batch: _Batch, window: float) -> None:
        """As leader: wait for the group's turn and for the call's token, the batch open to later callers
        all the while; then take the batch, make its call at once, and answer every part."""
        try:
            self._wait_for_turn(key, window, batch)
            batch.results = self._first_call(elbv2, key, batch)
            refused = [i for i, result in enumerate(batch.results) if result is _REFUSED_TOGETHER]
            if refused:
                self._redo_refused(elbv2, key, batch, refused)
        except BaseException as exc:  # noqa: BLE001 - handed to every caller, raised in each
            self._close(key, batch)
            batch.results = [exc] * len(batch.parts)
        finally:
            with self._lock:
                self._busy.discard(key)
            batch.answered()

    def _first_call(self, elbv2, key: tuple, batch: _Batch) -> list:
        """The batch's call; NotSent for every part when its token would come after every deadline in it
        (each node asks again on its next sync, and the group's next batch carries them)."""
        if not rate_limits.ready(elbv2, "DeregisterTargets"):
            batch.moved.set()
        try:
            return self._call(elbv2, key, batch)
        except rate_limits.Limited as exc:
            self._close(key, batch)
            return [NotSent.no_token(f"DeregisterTargets on {key[1]}", exc)] * len(batch.parts)

    def _call(self, elbv2, key: tuple, batch: _Batch, which: list[int] | None = None) -> list:
        """One DeregisterTargets for the parts ``which`` of the batch still in time, on a token of its own
        awaited until the last of their deadlines; per part of the batch, its answer (None where not in
        ``which``). None: the batch's first call, for every part it has as the token comes (the batch is
        then closed to later callers); it raises Limited when the token would come too late."""
        close = which is None
        try:
            with rate_limits.paid_ahead(elbv2, "DeregisterTargets", self._token_wait(batch, which)):
                if close:
                    self._close(key, batch)
                    which = list(range(len(batch.parts)))
                results: list = [None] * len(batch.parts)
                now = self._clock()
                sent = [i for i in which if batch.send_by[i] is None or now <= batch.send_by[i]]
                for i in which:
                    if i not in sent:
                        results[i] = NotSent(f"DeregisterTargets on {key[1]}: its deadline to go out passed "
                                             "while the group's call waited its turn")
                for i, result in zip(sent, _deregister_parts(elbv2, key[1], [batch.parts[i] for i in sent])):
                    results[i] = result
        except rate_limits.Limited as exc:  # no token before the last part's deadline: nothing sent
            if close:
                raise
            results = [None] * len(batch.parts)
            for i in which:
                results[i] = NotSent.no_token(f"DeregisterTargets on {key[1]}", exc)
        return results

    def _redo_refused(self, elbv2, key: tuple, batch: _Batch, refused: list[int]) -> None:
        """A call AWS refused with InvalidTarget names a target it does not know (its instance is gone; moto
        says so of one not registered), and not which: the group is read once, a part none of whose targets
        it holds is out, and the rest go out again together; refused again, each on its own."""
        try:
            held = group_states(elbv2, key[1])
        except Exception as exc:  # noqa: BLE001 - unread: those parts failed, and are asked again
            for i in refused:
                batch.results[i] = exc
            return
        still = [i for i in refused if any((t["Id"], t["Port"]) in held for t in batch.parts[i])]
        for i in refused:
            batch.results[i] = None
        if not still:
            return
        for i, result in enumerate(self._call(elbv2, key, batch, still)):
            if i in still:
                batch.results[i] = result
        for i in still:
            if batch.results[i] is _REFUSED_TOGETHER:
                batch.results[i] = _alone(elbv2, key[1], batch.parts[i])

    def _wait_for_turn(self, key: tuple, window: float, batch: _Batch) -> None:
        while True:
            with self._lock:
                due = self._last.get(key, float("-inf")) + window
                if key not in self._busy and time.monotonic() >= due:
                    self._busy.add(key)
                    self._last[key] = time.monotonic()
                    return
                if key in self._busy:  # behind another call of the group, which may wait for its token
                    batch.moved.set()
            time.sleep(max(0.001, min(window, due - time.monotonic())))

    def _token_wait(self, batch: _Batch, which: list[int] | None) -> float:
        """How long a call may wait for its token: until the last deadline to go out of the parts it carries
        (None: every part the batch has so far)."""
        with self._lock:
            deadlines = list(batch.send_by) if which is None else [batch.send_by[i] for i in which]
        if not deadlines or any(d is None for d in deadlines):
            return float("inf")  # the limiter's own bound for a call outside any hook call
        return max(deadlines) - self._clock()

    def _close(self, key: tuple, batch: _Batch) -> None:
        """Later callers join the group's next batch, or start one."""
        with self._lock:
            batches = self._pending.get(key, [])
            if batch in batches:
                batches.remove(batch)
            if not batches:
                self._pending.pop(key, None)


# A call's answer for each of its parts when AWS refused it with InvalidTarget: which part it meant is unsaid.
_REFUSED_TOGETHER = object()


def _deregister_parts(elbv2, target_group_arn: str, parts: list[list[dict]]) -> list:
    """One DeregisterTargets per 200 targets (whole parts each); per part None, GONE, _REFUSED_TOGETHER or
    the exception."""
    results: list = [None] * len(parts)
    chunk: list[int] = []
    size = 0
    for i, part in enumerate(parts + [None]):
        if part is None or (chunk and size + len(part) > BATCH):
            _one_call(elbv2, target_group_arn, parts, chunk, results)
            chunk, size = [], 0
        if part is not None:
            chunk.append(i)
            size += len(part)
    return results


def _alone(elbv2, target_group_arn: str, part: list[dict]):
    """One part's own call(s): None, GONE or the exception."""
    try:
        return deregister_targets(elbv2, target_group_arn, part[0]["Id"], [t["Port"] for t in part])
    except Exception as exc:  # noqa: BLE001
        return exc


def _one_call(elbv2, target_group_arn: str, parts: list[list[dict]], chunk: list[int], results: list) -> None:
    if not chunk:
        return
    targets = [t for i in chunk for t in parts[i]]
    if len(targets) > BATCH:  # one caller with more ports than a call takes: its own calls, as ever
        results[chunk[0]] = _alone(elbv2, target_group_arn, targets)
        return
    try:
        outcome = _unless_gone(elbv2.deregister_targets, TargetGroupArn=target_group_arn, Targets=targets)
        for i in chunk:
            results[i] = outcome
    except ClientError as exc:
        if error_code(exc) == "InvalidTarget" and len(chunk) > 1:
            for i in chunk:
                results[i] = _REFUSED_TOGETHER
        elif error_code(exc) == "InvalidTarget":
            results[chunk[0]] = None  # one caller's own targets: not registered, as deregister_targets says
        else:
            for i in chunk:
                results[i] = exc
    except Exception as exc:  # noqa: BLE001
        for i in chunk:
            results[i] = exc


DEREGISTRATIONS = DeregisterCoalescer()
