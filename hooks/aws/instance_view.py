"""The process's one view of the cluster's instances, and fresh reads that arrive together sent as one.

A Machine's sync used to list its instances by its UID tag: one
DescribeInstances per Machine per sync, about 3 a minute per Machine, which
spends the account's whole DescribeInstances bucket at a few hundred
Machines. Instead:

- ``InstanceView`` keeps the cluster's instances as one paginated
  DescribeInstances by the cluster tag answered at most ``max_age`` seconds
  ago, shared by every thread of the process; the caller that finds it stale
  reads it again while the others wait for that read (one read at a time).
  A Machine whose instance is recorded reads it, and any second instance
  tagged with its UID, from there.
- ``Batcher`` sends fresh reads that arrive within ``window`` seconds of the
  first as one call (as Karpenter's batcher does): the reads that must not
  trust a view. Those are a Machine with no instance recorded (the launch
  path: only a fresh read by its UID tag may say no instance exists, so an
  instance launched a moment ago is never launched again), an instance the
  view does not show, a destructive action's precondition
  (hooks/actuators.py), and every read fencing makes of an instance: a
  power-off is proven only by what DescribeInstances answers now
  (hooks/aws/ec2_power.py).

What the view cannot make wrong: an instance's ``terminated`` is final, and
every other state it shows only delays a decision by ``max_age``.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable

from hooks import ec2_names, machine_names
from hooks.aws import instances

# DescribeInstances takes at most 200 values per filter, and answers at most 1,000 instances a page.
FILTER_VALUES = 200
PAGE_SIZE = 1000


@dataclass(frozen=True)
class Snapshot:
    """The cluster's instances as one read saw them (terminated ones EC2 still lists included)."""

    at: float
    by_id: dict[str, dict] = field(default_factory=dict)
    by_uid: dict[str, list[dict]] = field(default_factory=dict)

    def of_machine(self, uid: str) -> list[dict]:
        """Every instance tagged with the Machine's UID, oldest first."""
        return list(self.by_uid.get(uid) or [])

    def of_pool(self, pool: str) -> list[dict]:
        """The pool's instances not terminated or going (the states ``instances.of_pool`` lists)."""
        return [i for i in self.by_id.values()
                if i["tags"].get(machine_names.TAG_POOL) == pool and i["state"] in ec2_names.KEPT_STATES]


def read_cluster(ec2, cluster_name: str, clock: Callable[[], float] = time.monotonic) -> Snapshot:
    """Every instance tagged for the cluster (owned or shared), in pages of PAGE_SIZE."""
    at = clock()
    by_id: dict[str, dict] = {}
    for page in ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{ec2_names.cluster_tag(cluster_name)}",
                      "Values": list(ec2_names.CLUSTER_TAG_VALUES)}],
            PaginationConfig={"PageSize": PAGE_SIZE}):
        for reservation in page.get("Reservations") or []:
            for instance in reservation.get("Instances") or []:
                summary = instances.summary(instance)
                by_id[summary["instanceID"]] = summary
    by_uid: dict[str, list[dict]] = {}
    for summary in by_id.values():
        uid = summary["tags"].get(machine_names.TAG_MACHINE_UID)
        if uid:
            by_uid.setdefault(uid, []).append(summary)
    return Snapshot(at, by_id, _oldest_first(by_uid))


class InstanceView:
    """Snapshots by (region, cluster), each served until ``max_age`` seconds old. Thread-safe; one read at a
    time per key, the others waiting for it. A read that fails keeps the last snapshot for nobody: the
    error is every waiting caller's."""

    def __init__(self, max_age: float, clock: Callable[[], float] = time.monotonic,
                 read: Callable[..., Snapshot] = read_cluster):
        self.max_age = max_age
        self._clock = clock
        self._read = read
        self._lock = threading.Lock()
        self._snapshots: dict[tuple[str, str], Snapshot] = {}
        self._reading: dict[tuple[str, str], _Batch] = {}  # the read in flight per key; its keys: the waiting

    def snapshot(self, ec2, region: str, cluster_name: str) -> Snapshot:
        key = (region, cluster_name)
        kept = self._fresh(key)
        if kept is not None:
            return kept
        with self._lock:
            flight = self._reading.get(key)
            leads = flight is None
            if leads:
                flight = self._reading[key] = _Batch()
            else:
                flight.keys.append(key)
        if leads:
            def read(_keys) -> dict:
                snapshot = self._read(ec2, cluster_name, self._clock)
                with self._lock:
                    self._snapshots[key] = snapshot
                return {key: snapshot}
            try:
                flight.run(read)  # its answer or its error, every waiting caller's
            finally:
                with self._lock:
                    del self._reading[key]
        else:
            flight.done.wait()
        if flight.error is not None:
            raise flight.error
        return flight.answers[key]

    def waiting(self, region: str, cluster_name: str) -> int:
        """How many callers wait for the read in flight (0: none in flight)."""
        with self._lock:
            flight = self._reading.get((region, cluster_name))
            return len(flight.keys) if flight is not None else 0

    def forget(self) -> None:
        with self._lock:
            self._snapshots.clear()

    def _fresh(self, key) -> Snapshot | None:
        with self._lock:
            kept = self._snapshots.get(key)
        if kept is not None and self._clock() - kept.at < self.max_age:
            return kept
        return None


class Batcher:
    """Reads of single keys that arrive within ``window`` seconds of the first become one ``read`` of all
    their keys (at most ``most`` a call; more start another batch). ``read`` answers a dict by key; a key it
    leaves out is answered None. An error of the batch's read is each of its callers' error."""

    def __init__(self, read: Callable[[list], dict], window: float, most: int = FILTER_VALUES,
                 sleep: Callable[[float], None] = time.sleep):
        self._read = read
        self._window = window
        self._most = most
        self._sleep = sleep
        self._lock = threading.Lock()
        self._open: _Batch | None = None

    def get(self, key: Hashable):
        with self._lock:
            batch = self._open
            leads = batch is None or len(batch.keys) >= self._most
            if leads:
                batch = self._open = _Batch()
            batch.keys.append(key)
        if leads:
            self._sleep(self._window)
            with self._lock:
                if self._open is batch:
                    self._open = None
            batch.run(self._read)
        else:
            batch.done.wait()
        if batch.error is not None:
            raise batch.error
        return batch.answers.get(key)


@dataclass
class _Batch:
    keys: list = field(default_factory=list)
    answers: dict = field(default_factory=dict)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def run(self, read: Callable[[list], dict]) -> None:
        try:
            self.answers = read(sorted(set(self.keys)))
        except Exception as exc:  # noqa: BLE001 - every caller of the batch gets it
            self.error = exc
        finally:
            self.done.set()


def _listed(ec2, filter_name: str, values: Iterable[str]):
    """Each instance (``instances.summary``) a DescribeInstances filter on ``values`` lists, in batches of
    FILTER_VALUES, with the batch it was asked in."""
    wanted = sorted(set(values))
    for start in range(0, len(wanted), FILTER_VALUES):
        batch = wanted[start:start + FILTER_VALUES]
        for page in ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": filter_name, "Values": batch}]):
            for reservation in page.get("Reservations") or []:
                for instance in reservation.get("Instances") or []:
                    yield batch, instances.summary(instance)


def read_by_ids(ec2, instance_ids: Iterable[str]) -> dict[str, dict]:
    """The instances EC2 knows among ``instance_ids``, by id (an instance-id filter: an id EC2 does not know
    is absent, where InstanceIds would fail the whole call)."""
    return {s["instanceID"]: s for batch, s in _listed(ec2, "instance-id", instance_ids) if s["instanceID"] in batch}


def read_by_uids(ec2, uids: Iterable[str]) -> dict[str, list[dict]]:
    """Every instance tagged with each Machine UID (terminated ones too), by UID, oldest first."""
    found: dict[str, list[dict]] = {}
    for batch, summary in _listed(ec2, f"tag:{machine_names.TAG_MACHINE_UID}", uids):
        uid = summary["tags"].get(machine_names.TAG_MACHINE_UID)
        if uid in batch:
            found.setdefault(uid, []).append(summary)
    return _oldest_first(found)


def _oldest_first(by_uid: dict[str, list[dict]]) -> dict[str, list[dict]]:
    for listed in by_uid.values():
        listed.sort(key=lambda s: (s["launchTime"] or "", s["instanceID"]))
    return by_uid


class ClusterInstances:
    """The process's view of the cluster's instances and its batched fresh reads, per region.

    ``clients(region)`` gives the region's EC2 client (the process's AwsClients); ``sleep`` is how a batch's
    first caller waits out the window.
    """

    def __init__(self, clients: Callable[[str], object], cluster_name: str, max_age: float, window: float,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self._clients = clients
        self.cluster_name = cluster_name
        self._view = InstanceView(max_age, clock)
        self._window = window
        self._sleep = sleep
        self._lock = threading.Lock()
        self._batchers: dict[tuple[str, str], Batcher] = {}

    def view(self, region: str) -> Snapshot | None:
        """The cluster's instances at most ``max_age`` old; None with no cluster name (nothing is tagged)."""
        if not self.cluster_name:
            return None
        return self._view.snapshot(self._clients(region), region, self.cluster_name)

    def of_machine(self, region: str, uid: str, recorded: str | None) -> tuple[dict | None, list[dict]]:
        """The instance the Machine keeps, and every other one tagged with its UID not terminated.

        With an instance ``recorded``, both come from the view, the recorded one read fresh when the view
        does not show it (untagged since, or not shown yet). With none recorded, only a fresh read by the
        UID tag may say that no instance exists: the caller may launch one.
        """
        view = self.view(region) if recorded else None
        tagged = view.of_machine(uid) if view is not None else self.fresh_by_uid(region, uid)
        if recorded:
            kept = next((i for i in tagged if i["instanceID"] == recorded), None) \
                or (view.by_id.get(recorded) if view is not None else None) or self.fresh_by_id(region, recorded)
        else:
            alive = [i for i in tagged if i["state"] != ec2_names.TERMINATED]
            kept = next((i for i in alive if i["state"] not in ec2_names.GONE_STATES), alive[0] if alive else None)
        duplicates = [i for i in tagged if i["state"] != ec2_names.TERMINATED
                      and (kept is None or i["instanceID"] != kept["instanceID"])]
        return kept, duplicates

    def fresh_by_id(self, region: str, instance_id: str) -> dict | None:
        """The instance as EC2 answers now, None when it no longer knows it."""
        return self._batcher(region, "id", read_by_ids).get(instance_id)

    def fresh_by_uid(self, region: str, uid: str) -> list[dict]:
        """Every instance tagged with the Machine's UID as EC2 answers now, oldest first."""
        return self._batcher(region, "uid", read_by_uids).get(uid) or []

    def _batcher(self, region: str, by: str, read: Callable) -> Batcher:
        with self._lock:
            batcher = self._batchers.get((region, by))
            if batcher is None:
                ec2 = self._clients(region)
                batcher = self._batchers[(region, by)] = Batcher(lambda keys: read(ec2, keys), self._window,
                                                                   sleep=self._sleep)
            return batcher
