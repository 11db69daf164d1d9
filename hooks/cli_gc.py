"""``nodewarden gc``: opt a cluster in or out of external resource GC, or pick its tasks.

    nodewarden gc enable    --cluster-name NAME [--namespace NS] [--kubeconfig PATH]
    nodewarden gc disable   --cluster-name NAME [--namespace NS] [--kubeconfig PATH]
    nodewarden gc configure --cluster-name NAME [--namespace NS] [--gc-task TASK ...]

Like ``clusterawsadm gc``: NAME is the Cluster API Cluster; its
infrastructure object (AWSCluster), or for EKS its AWSManagedControlPlane,
gets the annotation through the Kubernetes API. Without the Cluster API
Cluster (or its CRD), the AWSCluster/AWSManagedControlPlane labelled
``cluster.x-k8s.io/cluster-name=NAME``, else named NAME, is used.
``configure`` without ``--gc-task`` removes the tasks annotation: CAPA's
default tasks again.
"""
from __future__ import annotations

import argparse
import os
import sys

from lightkube.generic_resource import create_namespaced_resource

from hooks.kube.client import Kube, KubeUnavailable, is_missing
from hooks.plan import error_text
from hooks.teardown_names import CLUSTER_NAME_LABEL, GC_ANNOTATION, TASKS_ANNOTATION
from hooks.teardown.tasks import TASK_ORDER

AWS_CLUSTER = create_namespaced_resource("infrastructure.cluster.x-k8s.io", "v1beta2", "AWSCluster", "awsclusters")
AWS_MANAGED_CONTROL_PLANE = create_namespaced_resource(
    "controlplane.cluster.x-k8s.io", "v1beta2", "AWSManagedControlPlane", "awsmanagedcontrolplanes"
)
# The Cluster API Cluster, newest served version first.
CAPI_CLUSTERS = [
    create_namespaced_resource("cluster.x-k8s.io", version, "Cluster", "clusters") for version in ("v1beta2", "v1beta1")
]
GC_KINDS = {"AWSCluster": AWS_CLUSTER, "AWSManagedControlPlane": AWS_MANAGED_CONTROL_PLANE}


class TargetError(LookupError):
    pass


def _as_dict(obj) -> dict:
    return obj if isinstance(obj, dict) else obj.to_dict()


def _get_or_none(kube, res, name: str, namespace: str):
    try:
        return _as_dict(kube.get(res, name, namespace=namespace))
    except KubeUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - lightkube's ApiError or httpx's HTTPStatusError
        if is_missing(exc):
            return None
        raise


def _ref_kind(ref) -> str:
    return (ref or {}).get("kind", "") if isinstance(ref, dict) else ""


def find_target(kube, cluster_name: str, namespace: str) -> tuple[type, str, str]:
    """(resource class, object name, "Kind namespace/name") of the object cluster-gc reads."""
    for capi in CAPI_CLUSTERS:
        cluster = _get_or_none(kube, capi, cluster_name, namespace)
        if cluster is None:
            continue
        spec = cluster.get("spec") or {}
        # EKS: the control plane carries the annotation even when the
        # infrastructure object is an AWSManagedCluster.
        for ref in (spec.get("infrastructureRef"), spec.get("controlPlaneRef")):
            kind = _ref_kind(ref)
            if kind in GC_KINDS and ref.get("name"):
                return GC_KINDS[kind], ref["name"], f"{kind} {namespace}/{ref['name']}"
        raise TargetError(
            f"Cluster {namespace}/{cluster_name} references no AWSCluster or AWSManagedControlPlane"
        )
    for kind, res in GC_KINDS.items():
        try:
            labelled = kube.list(res, namespace=namespace, labels={CLUSTER_NAME_LABEL: cluster_name})
        except KubeUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001
            if is_missing(exc):
                continue
            raise
        names = sorted(_as_dict(o)["metadata"]["name"] for o in labelled)
        if len(names) > 1:
            raise TargetError(f"several {kind}s are labelled {CLUSTER_NAME_LABEL}={cluster_name}: {', '.join(names)}")
        if names:
            return res, names[0], f"{kind} {namespace}/{names[0]}"
    for kind, res in GC_KINDS.items():
        if _get_or_none(kube, res, cluster_name, namespace) is not None:
            return res, cluster_name, f"{kind} {namespace}/{cluster_name}"
    raise TargetError(
        f"no Cluster, AWSCluster or AWSManagedControlPlane for cluster {cluster_name!r} in namespace {namespace!r}"
    )


def set_annotation(kube, cluster_name: str, namespace: str, key: str, value: str | None) -> str:
    """Set (or, with None, remove) one annotation on the cluster's GC object; says what it did."""
    res, name, what = find_target(kube, cluster_name, namespace)
    kube.merge_patch(res, name, {"metadata": {"annotations": {key: value}}}, namespace=namespace)
    return f"{what}: {key}={value}" if value is not None else f"{what}: removed {key}"


def parse_gc_tasks(values: list[str] | None) -> str | None:
    """--gc-task values (repeated or comma-separated) as the annotation's value; None for none."""
    tasks = [t.strip() for value in values or [] for t in value.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASK_ORDER]
    if unknown:
        raise argparse.ArgumentTypeError(f"unsupported gc task(s): {', '.join(unknown)}; known: {', '.join(TASK_ORDER)}")
    ordered = [t for t in TASK_ORDER if t in tasks]
    return ",".join(ordered) or None


def _kube(args):
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig
    return Kube(timeout=10.0)


def run(args, kube=None) -> int:
    try:
        if args.gc_command == "configure":
            key, value = TASKS_ANNOTATION, parse_gc_tasks(args.gc_task)
        else:
            key, value = GC_ANNOTATION, "true" if args.gc_command == "enable" else "false"
        print(set_annotation(kube or _kube(args), args.cluster_name, args.namespace, key, value))
        return 0
    except argparse.ArgumentTypeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TargetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KubeUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - lightkube ApiError and transport errors, said plainly
        print(f"error: {error_text(exc)}", file=sys.stderr)
        return 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``gc`` and its subcommands on the main parser's subparsers."""
    gc = subparsers.add_parser("gc", help="external resource garbage collection of a CAPA cluster")
    commands = gc.add_subparsers(dest="gc_command", required=True)
    helps = {
        "enable": f"collect the cluster's external resources on deletion ({GC_ANNOTATION}=true)",
        "disable": f"opt the cluster out: delete it without collecting ({GC_ANNOTATION}=false)",
        "configure": f"choose what is collected ({TASKS_ANNOTATION})",
    }
    for name, text in helps.items():
        cmd = commands.add_parser(name, help=text, description=text)
        cmd.add_argument("--cluster-name", required=True, help="the Cluster API Cluster's name")
        cmd.add_argument("--namespace", "-n", default="default", help="its namespace (default: default)")
        cmd.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
        if name == "configure":
            cmd.add_argument(
                "--gc-task", action="append", metavar="TASK",
                help=f"a task to run: {', '.join(TASK_ORDER)} (repeat or comma-separate; none = CAPA's default)",
            )
        cmd.set_defaults(func=run)
    return gc
