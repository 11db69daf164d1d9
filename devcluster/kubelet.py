"""The kubelet stand-in: registers a Node for each instance a Machine launched in moto.

On AWS, an instance a Machine launches boots, its user data starts a kubelet
with the flags the Machine rendered into it, and the kubelet registers a Node
and keeps it alive. moto's instances never boot, so this module does the
kubelet's registration and hands the Node to kwok (devcluster/kwok.py), which
does the rest of a kubelet's part: the Lease, the conditions, the pods' phases.
Everything else is the real control plane: kube-apiserver stores the Node, the
node lifecycle controller in kube-controller-manager judges its health from
its Lease, the scheduler places pods on it, Metacontroller and the hooks
(Machines and NodePools included) act on it.

Every ``poll`` seconds (0.5) one pass, :meth:`KubeletStandin.poll_once`:

- finds the instances a Machine launched (tagged ``nodewarden.io/machine-uid``,
  by one DescribeTags), describes those and keeps the ones tagged
  ``kubernetes.io/cluster/<cluster>``; other instances, such as the demo's own
  fleet, are left alone and never described;
- an instance running for ``boot_delay`` seconds (1 by default) has "booted":
  its user data is read as a bootstrap script would read it
  (DescribeInstanceAttribute userData, base64; gzip is unpacked), its Node
  is registered, and then given kwok's label, so kwok keeps it alive;
- an instance no longer running (stopping, stopped, shutting-down,
  terminated, or gone from EC2) has a dead kubelet: its Node loses kwok's
  label, its Lease is no longer renewed, so the node lifecycle controller
  turns it Unknown. The Node is never deleted here (the Machine controller
  does that) and never registered again, not even if the instance runs again.

What it reads from the user data, anywhere in it, including inside a quoted
``--kubelet-extra-args '...'`` as the Machines' default template writes it:

- ``--node-labels=k=v,k2=v2``: the Node's labels;
- ``--register-with-taints=k=v:Effect,k2:Effect``: the Node's taints;
- ``--nodewarden-standin=never-register``: a test hook, never a kubelet flag.
  An instance whose user data mentions it is never registered, which models
  an instance whose kubelet never comes up (a Machine's registration TTL).

Repeated flags add up, as the kubelet's do. User data with neither flag (or
none at all) still registers, like a kubelet with no extra arguments. A
malformed value makes a kubelet exit at start; the stand-in logs it and never
registers that instance.

The Node: named after the instance's PrivateDnsName (its id if it has none);
the parsed labels plus ``kubernetes.io/hostname``, ``kubernetes.io/os``,
``kubernetes.io/arch`` (from the instance type's processor, amd64 if unknown),
``node.kubernetes.io/instance-type`` and ``topology.kubernetes.io/region`` and
``zone``; ``spec.providerID`` ``aws:///<zone>/<instance-id>``; the parsed
taints; capacity and allocatable as ``hooks.machines.capacity.resources``
computes them from the instance type's DescribeInstanceTypes facts (a
Machine's in-flight figures, so the kube-scheduler places pods by the
allocatable the hooks plan with; a type EC2 does not describe counts as 2
vCPUs and 4 GiB); the instance's addresses, its architecture. The
conditions (Ready=True, no pressure) are kwok's to post.

Restarts are safe: a Node of that name with the same providerID is adopted
(its status is posted again and kwok's label put back; its other labels and
its taints are left as whoever changed them last left them). A Node of that
name with another providerID is not touched; that is logged, and tried again
each pass.

It does not report images, volumes or resource pressure, or apply the
NodeRestriction limits on ``--node-labels``.

Cluster starts one per local stack (`make up` and the e2e tests); it logs to
``<workdir>/logs/kubelet-standin.log`` beside the other components' logs.
"""
from __future__ import annotations

import base64
import binascii
import gzip
import logging
import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from hooks import ec2_names, machine_names
from hooks.aws.instances import type_facts
from hooks.machines.capacity import resources

from . import fleet, kwok
from .api import STRATEGIC, AdminApi, ApiError
from .procs import ProcessFailed

NODES = "/api/v1/nodes"
LOG_NAME = "kubelet-standin.log"
# The kubelet sets it; without it the attach/detach controller ignores the node.
ADC_ANNOTATION = "volumes.kubernetes.io/controller-managed-attach-detach"
# Anywhere in an instance's user data: it never registers.
NEVER_REGISTER = "--nodewarden-standin=never-register"
LABELS_FLAG = "--node-labels"
TAINTS_FLAG = "--register-with-taints"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_log = logging.getLogger("devcluster.kubelet")
# Its lines go to its own file, as every component's output does, not to the launcher's terminal.
_log.propagate = False


class BadFlag(ValueError):
    """A kubelet flag value a kubelet would refuse to start with."""


@dataclass(frozen=True)
class KubeletFlags:
    """What a bootstrap script hands the kubelet from the user data."""

    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict] = field(default_factory=list)
    never_register: bool = False


# When DescribeInstanceTypes does not know the type: a small x86 machine's facts.
UNKNOWN_TYPE = {"vcpus": 2, "memoryMiB": 4096, "architectures": ["x86_64"]}


# -- user data -------------------------------------------------------------------

def decode_user_data(value: str | None) -> str:
    """The text of user data as EC2 returns it (base64; gzip unpacked)."""
    if not value:
        return ""
    try:
        raw = base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        return ""
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except OSError:
            return ""
    return raw.decode("utf-8", errors="replace")


def _words(text: str) -> Iterator[str]:
    """Shell words, line by line (comments dropped); a word holding spaces, such as
    ``--kubelet-extra-args '--node-labels=... --register-with-taints=...'``'s
    argument, is split again, since those are the kubelet's own arguments."""
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote: read it as plain words
            words = line.split()
        for word in words:
            if any(c.isspace() for c in word):
                yield from _words(word)
            else:
                yield word


def _flag_values(words: list[str], flag: str) -> list[str]:
    """Every value of ``flag``, given as ``--flag=value`` or ``--flag value``."""
    values = []
    for index, word in enumerate(words):
        if word.startswith(flag + "="):
            values.append(word[len(flag) + 1:])
        elif word == flag and index + 1 < len(words):
            values.append(words[index + 1])
    return values


def parse_labels(value: str) -> dict[str, str]:
    """``k=v,k2=v2`` (the kubelet's --node-labels)."""
    labels: dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise BadFlag(f"{LABELS_FLAG}: {item!r} is not key=value")
        labels[key.strip()] = val.strip()
    return labels


def parse_taints(value: str) -> list[dict]:
    """``k=v:Effect,k2:Effect`` (the kubelet's --register-with-taints)."""
    taints: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        spec, sep, effect = item.rpartition(":")
        if not sep or not spec:
            raise BadFlag(f"{TAINTS_FLAG}: {item!r} is not key[=value]:Effect")
        if effect not in EFFECTS:
            raise BadFlag(f"{TAINTS_FLAG}: {item!r} has effect {effect!r}, not one of {', '.join(EFFECTS)}")
        key, has_value, val = spec.partition("=")
        if not key:
            raise BadFlag(f"{TAINTS_FLAG}: {item!r} has no key")
        if (key, effect) in seen:
            raise BadFlag(f"{TAINTS_FLAG}: {key}:{effect} is given twice")
        seen.add((key, effect))
        taint = {"key": key, "effect": effect}
        if has_value:
            taint["value"] = val
        taints.append(taint)
    return taints


def parse_user_data(text: str) -> KubeletFlags:
    """The kubelet flags a bootstrap script would find in the user data.

    Raises BadFlag on a value a kubelet would refuse."""
    if NEVER_REGISTER in text:
        return KubeletFlags(never_register=True)
    words = list(_words(text))
    labels: dict[str, str] = {}
    for value in _flag_values(words, LABELS_FLAG):
        labels.update(parse_labels(value))
    taints: list[dict] = []
    for value in _flag_values(words, TAINTS_FLAG):
        taints.extend(parse_taints(value))
    pairs = [(t["key"], t["effect"]) for t in taints]
    if len(pairs) != len(set(pairs)):
        raise BadFlag(f"{TAINTS_FLAG}: a taint is given twice")
    return KubeletFlags(labels=labels, taints=taints)


# -- the Node ----------------------------------------------------------------------

def node_arch(facts: dict) -> str:
    """The Kubernetes GOARCH of an instance type's facts: arm64 for a Graviton, amd64 otherwise."""
    archs = facts.get("architectures") or []
    return "arm64" if "arm64" in archs and "x86_64" not in archs else "amd64"


def node_name(instance: dict) -> str:
    return instance.get("PrivateDnsName") or instance["InstanceId"]


def provider_id(instance: dict) -> str:
    return f"aws:///{instance['Placement']['AvailabilityZone']}/{instance['InstanceId']}"


def node_status(instance: dict, facts: dict) -> dict:
    """What a kubelet posts at registration, but for the conditions (kwok's): capacity, addresses."""
    capacity, allocatable = resources(facts)
    if not capacity:
        capacity, allocatable = resources(UNKNOWN_TYPE)
    addresses = [{"type": "InternalIP", "address": instance["PrivateIpAddress"]}] \
        if instance.get("PrivateIpAddress") else []
    addresses.append({"type": "Hostname", "address": node_name(instance)})
    if instance.get("PrivateDnsName"):
        addresses.append({"type": "InternalDNS", "address": instance["PrivateDnsName"]})
    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "addresses": addresses,
        "nodeInfo": {"architecture": node_arch(facts), "operatingSystem": "linux"},
    }


def node_manifest(instance: dict, flags: KubeletFlags, facts: dict, region: str) -> dict:
    """The Node a kubelet on ``instance`` (a DescribeInstances entry, its type's ``facts`` as
    ``hooks.aws.instances.type_facts`` gives them) registers; kwok's label comes once its status is posted."""
    name = node_name(instance)
    zone = instance["Placement"]["AvailabilityZone"]
    labels = {
        **flags.labels,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": node_arch(facts),
        "node.kubernetes.io/instance-type": instance["InstanceType"],
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
    }
    spec: dict = {"providerID": provider_id(instance)}
    if flags.taints:
        spec["taints"] = [dict(t) for t in flags.taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {ADC_ANNOTATION: "true"}},
        "spec": spec,
        "status": node_status(instance, facts),
    }


def _tags(instance: dict) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in instance.get("Tags") or []}


# -- the stand-in --------------------------------------------------------------------

class KubeletStandin:
    """A kubelet's registration for every instance a Machine launched: a polling thread.

        standin = KubeletStandin(api, fleet.Aws(env), "devcluster", log_path=...).start()
        ...
        standin.stop()
    """

    def __init__(self, api: AdminApi, aws: fleet.Aws, cluster_name: str, *, boot_delay: float = 1.0,
                 poll: float = 0.5, log_path: Path | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.api, self.aws, self.cluster_name = api, aws, cluster_name
        self.region = aws.ec2.meta.region_name
        self.boot_delay, self.poll = boot_delay, poll
        self.clock = clock
        # Read by other threads (tests), written by the poll only.
        self.nodes: dict[str, str] = {}  # instance id -> node name, kwok's
        self.dead: dict[str, str] = {}  # instance id -> node name, out of kwok's hands for good
        self.skipped: dict[str, str] = {}  # instance id -> why it is never registered
        self._booting: dict[str, float] = {}  # instance id -> when it was first seen running
        self._conflicts: set[str] = set()  # instance ids whose name clash was logged
        self._types: dict[str, dict] = {}  # instance type -> its facts
        self._last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-standin", daemon=True)
        self._started = False
        self.log = logging.LoggerAdapter(_log, {"standin": id(self)})
        self._handler: logging.Handler | None = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(log_path)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            # The logger is shared; this file takes only this stand-in's lines.
            handler.addFilter(lambda record: getattr(record, "standin", None) == id(self))
            _log.addHandler(handler)
            _log.setLevel(logging.INFO)
            self._handler = handler

    @classmethod
    def for_env(cls, api: AdminApi, aws_env: dict[str, str], cluster_name: str, **kwargs) -> "KubeletStandin":
        """With EC2 calls that give up quickly, so a stop is never held up by moto."""
        config = Config(connect_timeout=2, read_timeout=10, retries={"max_attempts": 2})
        return cls(api, fleet.Aws(aws_env, config), cluster_name, **kwargs)

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> "KubeletStandin":
        self.log.info("--- kubelet stand-in for cluster %s: poll %.1fs, boot delay %.1fs; kwok keeps "
                      "the Nodes alive (%s)", self.cluster_name, self.poll, self.boot_delay, kwok.SELECTOR)
        self._thread.start()
        self._started = True
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        if self._handler is not None:
            self.log.info("stopped")
            _log.removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    def check(self) -> None:
        """Raise if the poll thread died while it should run."""
        if self._started and not self._stop.is_set() and not self._thread.is_alive():
            raise ProcessFailed("the kubelet stand-in's poll thread exited")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
                self._last_error = ""
            except Exception as exc:  # noqa: BLE001 - the next pass retries; the same error is logged once
                message = f"{type(exc).__name__}: {exc}"
                if message != self._last_error:
                    self.log.warning("pass failed (retried every %.1fs): %s", self.poll, message)
                    self._last_error = message
            self._stop.wait(self.poll)

    # -- one pass ------------------------------------------------------------------
    def poll_once(self) -> None:
        instances = self._instances()
        for instance_id, name in list(self.nodes.items()):
            instance = instances.get(instance_id)
            state = instance["State"]["Name"] if instance else "gone"
            if state != ec2_names.RUNNING:
                self._die(instance_id, f"instance {instance_id} is {state}")
        if self.nodes:
            self._forget_deleted_nodes()
        for instance_id, instance in instances.items():
            if instance_id in self.nodes or instance_id in self.dead or instance_id in self.skipped:
                continue
            if instance["State"]["Name"] != ec2_names.RUNNING:
                self._booting.pop(instance_id, None)  # it stopped before it booted
                continue
            first_seen = self._booting.setdefault(instance_id, self.clock())
            if self.clock() - first_seen < self.boot_delay:
                continue
            self._register(instance)

    def _instances(self) -> dict[str, dict]:
        """The cluster's instances a Machine launched. Only those are described: which they are comes from
        one DescribeTags for the Machines' tag. Described by a tag filter, or all of them, a fleet of other
        instances (a benchmark's 500) would cost moto most of a core at one pass every half second, on the
        cores the rest of the local stack shares (moto matches a tag filter by listing every tag per
        instance)."""
        machines: set[str] = set()
        for page in self.aws.ec2.get_paginator("describe_tags").paginate(
                Filters=[{"Name": "resource-type", "Values": ["instance"]},
                         {"Name": "key", "Values": [machine_names.TAG_MACHINE_UID]}]):
            machines.update(tag["ResourceId"] for tag in page["Tags"])
        if not machines:
            return {}
        found: dict[str, dict] = {}
        cluster_tag = ec2_names.cluster_tag(self.cluster_name)
        ids = sorted(machines)
        for start in range(0, len(ids), 200):  # a bounded filter per call, however many Machines
            # A filter, not InstanceIds: an instance gone since DescribeTags is absent, not an error.
            pages = self.aws.ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "instance-id", "Values": ids[start:start + 200]}])
            for page in pages:
                for reservation in page["Reservations"]:
                    for instance in reservation["Instances"]:
                        if cluster_tag in _tags(instance):
                            found[instance["InstanceId"]] = instance
        return found

    def _die(self, instance_id: str, why: str) -> None:
        name = self.nodes.pop(instance_id)
        kwok.release(self.api, name)
        self.dead[instance_id] = name
        self.log.info("%s: the kubelet of node %s is dead: out of kwok's selector, its Lease is no longer "
                      "renewed", why, name)

    def _forget_deleted_nodes(self) -> None:
        """A Node deleted (or replaced) under a live kubelet: a kubelet registers once, so it is done."""
        live = {n["metadata"]["name"] for n in self.api.get(NODES)["items"]}
        for instance_id, name in list(self.nodes.items()):
            if name not in live:
                self._die(instance_id, f"node {name} was deleted")

    def _user_data(self, instance_id: str) -> str:
        attribute = self.aws.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        return decode_user_data((attribute.get("UserData") or {}).get("Value"))

    def _instance_type(self, name: str) -> dict:
        if name not in self._types:
            try:
                described = self.aws.ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"]
                self._types[name] = type_facts(described[0])
            except (ClientError, BotoCoreError, IndexError, KeyError) as exc:
                self.log.warning("instance type %s not described (%s): %d vCPUs, %d MiB, %s", name, exc,
                                 UNKNOWN_TYPE["vcpus"], UNKNOWN_TYPE["memoryMiB"], node_arch(UNKNOWN_TYPE))
                self._types[name] = UNKNOWN_TYPE
        return self._types[name]

    def _skip(self, instance_id: str, why: str, level: int = logging.WARNING) -> None:
        self.skipped[instance_id] = why
        self._booting.pop(instance_id, None)
        self.log.log(level, "instance %s is never registered: %s", instance_id, why)

    def _register(self, instance: dict) -> None:
        instance_id = instance["InstanceId"]
        machine = _tags(instance).get(machine_names.TAG_MACHINE, "?")
        try:
            flags = parse_user_data(self._user_data(instance_id))
        except BadFlag as exc:
            self._skip(instance_id, f"machine {machine}: a kubelet would exit on {exc}")
            return
        if flags.never_register:
            self._skip(instance_id, f"machine {machine}: its user data says {NEVER_REGISTER}", logging.INFO)
            return
        manifest = node_manifest(instance, flags, self._instance_type(instance["InstanceType"]), self.region)
        name = manifest["metadata"]["name"]
        status = manifest.pop("status")
        try:
            self.api.create(NODES, manifest)
            verb = "registered"
        except ApiError as exc:
            if exc.status in (400, 422):
                self._skip(instance_id, f"machine {machine}: the API server refused node {name}: {exc}")
                return
            if exc.status != 409:
                raise
            node = self.api.get_or_none(f"{NODES}/{name}")
            if node is None:
                return  # deleted meanwhile: the next pass registers it
            theirs = (node.get("spec") or {}).get("providerID")
            if theirs != manifest["spec"]["providerID"]:
                if instance_id not in self._conflicts:
                    self._conflicts.add(instance_id)
                    self.log.warning("node %s exists with providerID %s, not %s: left alone (instance %s, "
                                     "machine %s); tried again every pass", name, theirs,
                                     manifest["spec"]["providerID"], instance_id, machine)
                return
            verb = "adopted"
        # Its status first, then kwok's label: kwok fills in only what a Node lacks.
        self.api.patch(f"{NODES}/{name}/status", {"status": status}, content_type=STRATEGIC)
        kwok.manage(self.api, name)
        self.nodes[instance_id] = name
        self._booting.pop(instance_id, None)
        self._conflicts.discard(instance_id)
        self.log.info("%s node %s for instance %s (machine %s, %s): labels %s, taints %s", verb, name,
                      instance_id, machine, instance["InstanceType"], flags.labels or "none",
                      [_taint_text(t) for t in flags.taints] or "none")


def _taint_text(taint: dict) -> str:
    value = f"={taint['value']}" if "value" in taint else ""
    return f"{taint['key']}{value}:{taint['effect']}"
