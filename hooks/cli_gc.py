"""``nodewarden gc``: opt a cluster in or out of external resource GC, pick its tasks, plan and audit it.

    nodewarden gc enable    --cluster-name NAME [--namespace NS] [--kubeconfig PATH]
    nodewarden gc disable   --cluster-name NAME [--namespace NS] [--kubeconfig PATH]
    nodewarden gc configure --cluster-name NAME [--namespace NS] [--gc-task TASK ...]
    nodewarden gc plan  CLUSTER [--region R] [--gc-task TASK ...] [--include-lb-controller] [--output text|json]
    nodewarden gc audit CLUSTER [--region R] [--expect-kept PLAN.json] [--output text|json]

Like ``clusterawsadm gc``: NAME is the Cluster API Cluster; its
infrastructure object (AWSCluster), or for EKS its AWSManagedControlPlane,
gets the annotation through the Kubernetes API. Without the Cluster API
Cluster (or its CRD), the AWSCluster/AWSManagedControlPlane labelled
``cluster.x-k8s.io/cluster-name=NAME``, else named NAME, is used.
``configure`` without ``--gc-task`` removes the tasks annotation: the
default tasks again.

``plan`` changes nothing: it prints what cluster-gc would delete for the
cluster, in order, and what it would keep and why. The tasks, the region and
the cluster's name in its tags come from the cluster's object when the
kubeconfig reaches it (as finalize reads them), flags override. ``audit``
lists what is still tagged for the cluster two ways (hooks.aws.gc.audit) and
exits 0 only when nothing is left but what a saved plan said it keeps.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError
from lightkube.generic_resource import create_namespaced_resource

from hooks.aws.clients import AwsClients
from hooks.aws.gc import audit, discovery
from hooks.config import ConfigError, load_settings
from hooks.contract import RequestError
from hooks.kube.client import Kube, KubeUnavailable, is_missing
from hooks.plan import error_text
from hooks.teardown_names import CLUSTER_NAME_LABEL, DELETE_FOR_MOVE, GC_ANNOTATION, TASKS_ANNOTATION, WAITED_FOR
from hooks.teardown.ownership import tagged_for
from hooks.teardown.plan import plan_of
from hooks.teardown.scope import COLLECT, Scope, cluster_name, is_region, parse_go_bool, parse_tasks
from hooks.teardown.tasks import DEFAULT_TASKS, KIND_TASK, TASK_ORDER

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


def _env_region() -> str:
    """The region the AWS SDK would take from the environment."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or ""


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


# ---------------------------------------------------------------- gc plan

TEXT, JSON = "text", "json"
# Where the plan's tasks came from.
FROM_FLAGS, FROM_ANNOTATION, FROM_DEFAULT = "flags", "annotation", "default"


@dataclass
class PlanInputs:
    """What a plan is made for, and where each part came from."""

    cluster_name: str
    region: str
    tasks: tuple[str, ...]
    tasks_from: str
    include_lb_controller: bool
    cluster_object: str = ""  # "AWSCluster ns/name" when the kubeconfig reached it
    notes: list[str] = field(default_factory=list)


class UsageError(ValueError):
    """A command line or input file the command cannot work with (exit 2)."""


# What a cluster's name in a tag key can be: a Kubernetes object name, an EKS name (underscores from
# CAPA's default). Nothing else reaches a tag filter: EC2's read ``*`` and ``?`` as wildcards, and an
# empty name matches nothing, which an audit would call clean.
_CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def checked_cluster(name: str) -> str:
    """``name`` if it can be a cluster's name in its tags; raises UsageError otherwise."""
    if not _CLUSTER_NAME.fullmatch(name):
        raise UsageError(f"{name!r} is not a cluster name (letters, digits, '.', '_' and '-', "
                         "starting with a letter or digit)")
    return name


def checked_region(region: str, where: str) -> str:
    """``region`` if shaped like an AWS region (or empty: none given); raises UsageError otherwise."""
    if region and not is_region(region):
        raise UsageError(f"{where} {region[:64]!r} is not an AWS region")
    return region


def _cluster_object(kube, cluster: str, namespace: str) -> tuple[dict | None, str, str]:
    """(the object cluster-gc reads, "Kind ns/name", why it was not read)."""
    try:
        res, name, what = find_target(kube, cluster, namespace)
        return _as_dict(kube.get(res, name, namespace=namespace)), what, ""
    except (TargetError, KubeUnavailable) as exc:
        return None, "", str(exc)
    except Exception as exc:  # noqa: BLE001 - lightkube ApiError and transport errors, said plainly
        return None, "", error_text(exc)


def plan_inputs(args, kube) -> PlanInputs:
    """The cluster's name in its tags, region and tasks: from the cluster's object as finalize reads
    them when the kubeconfig reaches it, flags overriding. Raises UsageError when one cannot be had."""
    checked_cluster(args.cluster)
    checked_region(args.region or "", "--region")
    obj, what, why_not = _cluster_object(kube, args.cluster, args.namespace)
    notes: list[str] = []
    name, region, tasks, tasks_from = args.cluster, "", DEFAULT_TASKS, FROM_DEFAULT
    if obj is None:
        notes.append(f"cluster object not read ({why_not}): {args.cluster!r} is taken as the name in the tags")
    else:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        try:
            tagged_name, problem = cluster_name(obj)
        except RequestError as exc:
            tagged_name, problem = "", f"cannot read {exc}"
        if tagged_name and not _CLUSTER_NAME.fullmatch(tagged_name):
            tagged_name, problem = "", f"its cluster name {tagged_name[:64]!r} cannot be a tag's"
        if tagged_name:
            name = tagged_name
        else:
            notes.append(f"{what}: {problem}; {args.cluster!r} is taken as the name in the tags")
        spec_region = (obj.get("spec") or {}).get("region")
        region = spec_region if isinstance(spec_region, str) else ""
        raw = annotations.get(TASKS_ANNOTATION)
        if raw is not None and raw.strip():
            parsed, problem = parse_tasks(raw)
            if problem and not args.gc_task:
                raise UsageError(f"{what}: {problem} (cluster-gc blocks the deletion until it is fixed); "
                                 "pass --gc-task to plan with other tasks")
            tasks, tasks_from = parsed, FROM_ANNOTATION
        enabled = parse_go_bool(annotations[GC_ANNOTATION]) if GC_ANNOTATION in annotations else True
        if enabled is None:
            notes.append(f"{what}: {GC_ANNOTATION}={annotations[GC_ANNOTATION]!r} is not a boolean: "
                         "cluster-gc blocks the deletion until it is fixed")
        elif not enabled:
            notes.append(f"{what} is opted out ({GC_ANNOTATION}={annotations[GC_ANNOTATION]}): its deletion "
                         "deletes nothing; below is what it would delete if opted in")
        if DELETE_FOR_MOVE in annotations:
            notes.append(f"{what} carries {DELETE_FOR_MOVE}: a deletion for clusterctl move deletes nothing")
    if args.gc_task is not None:
        try:
            chosen = parse_gc_tasks(args.gc_task)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(str(exc)) from exc
        if chosen is None:
            raise UsageError(f"--gc-task names no task; known: {', '.join(TASK_ORDER)}")
        tasks, tasks_from = tuple(chosen.split(",")), FROM_FLAGS
    region = args.region or region or _env_region()
    checked_region(region, "region")
    if not region:
        raise UsageError("no region: pass --region (the cluster object's spec.region was not read, "
                         "and AWS_REGION is not set)")
    return PlanInputs(name, region, tasks, tasks_from, bool(args.include_lb_controller), what, notes)


def _tasks_origin(inputs: PlanInputs) -> str:
    if inputs.tasks_from == FROM_FLAGS:
        return "from --gc-task"
    if inputs.tasks_from == FROM_ANNOTATION:
        return f"from {TASKS_ANNOTATION} on {inputs.cluster_object}"
    where = f"no tasks annotation on {inputs.cluster_object}" if inputs.cluster_object else "no cluster object read"
    return f"default tasks: {where}"


def plan_document(inputs: PlanInputs, gc_plan, others: list[dict] | None = None) -> dict:
    """The plan as JSON: what ``gc audit --expect-kept`` reads back.

    ``others``: discovery's ``[{"arn", "tags"}]`` of kinds cluster-gc does not collect (``otherKinds``):
    neither deleted nor kept by it, so the audit counts them until whoever made them deletes them.
    """
    return {
        "cluster": inputs.cluster_name,
        "region": inputs.region,
        "tasks": list(inputs.tasks),
        "tasksFrom": inputs.tasks_from,
        "includeLbController": inputs.include_lb_controller,
        "clusterObject": inputs.cluster_object or None,
        "notes": inputs.notes,
        "delete": [{**r, "task": KIND_TASK.get(r["kind"])} for r in gc_plan.delete],
        # waitedFor: cluster-gc deletes it once free, and holds the cluster until then.
        "keep": [{**r, "reason": reason, "waitedFor": reason in WAITED_FOR} for r, reason in gc_plan.keep],
        "otherKinds": [dict(zip(("kind", "id"), audit.classify_arn(r["arn"])), tags=r["tags"]) for r in others or []],
    }


def _print_plan(document: dict, inputs: PlanInputs) -> None:
    print(f"cluster-gc plan for cluster {document['cluster']} in {document['region']} (nothing is changed)")
    if inputs.cluster_object:
        print(f"  cluster object: {inputs.cluster_object}")
    print(f"  tasks: {', '.join(inputs.tasks)} ({_tasks_origin(inputs)})")
    lb = "included" if inputs.include_lb_controller else "not included (--include-lb-controller)"
    print(f"  AWS Load Balancer Controller's resources: {lb}")
    for note in inputs.notes:
        print(f"  note: {note}")
    print(f"\nwould delete, in this order ({len(document['delete'])}):")
    for i, r in enumerate(document["delete"], 1):
        state = f" [{r['state']}]" if r.get("state") else ""
        print(f"  {i:3}. {r['kind']:<22} {r['id']}{state}")
    print(f"\nwould keep ({len(document['keep'])}):")
    for r in document["keep"]:
        print(f"       {r['kind']:<22} {r['id']}: {r['reason']}")
    if document["otherKinds"]:
        print(f"\nnot a kind cluster-gc collects ({len(document['otherKinds'])}): whoever made them deletes them "
              "(CAPA its network); gc audit counts them until they are gone")
        for r in document["otherKinds"]:
            print(f"       {r['kind']:<22} {r['id']}")
    waited = sum(1 for r in document["keep"] if r["waitedFor"])
    if waited:
        print(f"\n{waited} of the kept are deleted once free: the cluster's deletion waits for them")


def run_plan(args, kube=None, aws=None) -> int:
    try:
        inputs = plan_inputs(args, kube or _kube(args))
        aws = aws or AwsClients(load_settings())
        found = discovery.discover_all(aws, inputs.cluster_name, inputs.region, inputs.include_lb_controller)
        if found.get("fallback"):
            inputs.notes.append(f"found by the describe calls alone: {found['fallback']}")
        scope = Scope(COLLECT, "", inputs.cluster_name, inputs.region, inputs.tasks, inputs.include_lb_controller)
        document = plan_document(inputs, plan_of(scope, found["resources"]), found.get("others"))
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as exc:
        print(f"error: AWS: {error_text(exc)}", file=sys.stderr)
        return 1
    if args.output == JSON:
        json.dump(document, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        _print_plan(document, inputs)
    return 0


# --------------------------------------------------------------- gc audit

AUDIT_NO_VERDICT = 2  # the audit could not run (input, credentials, AWS): no verdict either way


def read_expected_kept(path: str, cluster: str, region: str) -> tuple[str, dict[tuple[str, str], str]]:
    """(the plan's region, {(kind, id): reason}) from ``gc plan --output json``'s document."""
    try:
        with open(path, encoding="utf-8") as fh:
            document = json.load(fh)
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"--expect-kept {path}: {exc}") from exc
    keep = document.get("keep") if isinstance(document, dict) else None
    if not isinstance(keep, list) or not all(isinstance(r, dict) and isinstance(r.get("kind"), str)
                                             and isinstance(r.get("id"), str) for r in keep):
        raise UsageError(f"--expect-kept {path}: not a plan of `nodewarden gc plan --output json` "
                         "(needs \"keep\": a list of objects with kind and id)")
    if document.get("cluster") != cluster:  # a plan names its cluster: one that names none clears nothing
        named = document.get("cluster")
        raise UsageError(f"--expect-kept {path} is the plan of cluster {named!r}, not {cluster!r}" if named else
                         f"--expect-kept {path} names no cluster (its \"cluster\"); a plan keeps only its own")
    planned_region = document.get("region") if isinstance(document.get("region"), str) else ""
    if region and planned_region and planned_region != region:
        raise UsageError(f"--expect-kept {path} is a plan for {planned_region}, not {region}")
    # What the plan keeps only until it is free is collected too: still there, it is a leftover.
    return planned_region, {(r["kind"], r["id"]): str(r.get("reason") or "kept by the plan")
                            for r in keep if not r.get("waitedFor")}


def _line(item: audit.Found, detail: str = "") -> str:
    state = f" [{item.state}]" if item.state else ""
    ways = " + ".join(sorted(item.seen_by))
    return f"  {item.kind:<22} {item.id}{state}  ({ways}){': ' + detail if detail else ''}"


def _print_audit(report: audit.AuditReport, found: int) -> None:
    print(f"audit of cluster {report.cluster_name} in {report.region}: {found} resource(s) tagged for it "
          f"by the tagging API or the describe calls")
    if report.kept:
        print(f"\nkept, as the plan said ({len(report.kept)}):")
        for item, reason in report.kept:
            print(_line(item, reason))
    if report.gone:
        print(f"\nlisted by the tagging API only, gone by the describe calls ({len(report.gone)}): "
              "deleted or terminated moments ago")
        for item in report.gone:
            print(_line(item))
    if report.describe_only:
        print(f"\nfound by the describe calls only ({len(report.describe_only)}): "
              "the tagging API does not list them (it lags, or does not cover the type)")
        for item in report.describe_only:
            print(_line(item))
    if report.tagging_only:
        print(f"\nlisted by the tagging API only, of kinds no describe call covers ({len(report.tagging_only)})")
        for item in report.tagging_only:
            print(_line(item))
    print(f"\nleftovers ({len(report.leftovers)}):")
    for item in report.leftovers:
        tags = ", ".join(f"{k}={v}" for k, v in item.tags.items() if tagged_for({k: v}, report.cluster_name))
        print(_line(item, tags))
    print("\nclean: nothing left but what the plan keeps" if report.clean
          else f"\nNOT CLEAN: {len(report.leftovers)} leftover(s)")


def run_audit(args, aws=None) -> int:
    try:
        checked_cluster(args.cluster)
        checked_region(args.region or "", "--region")
        planned_region, expected = "", {}
        if args.expect_kept:
            planned_region, expected = read_expected_kept(args.expect_kept, args.cluster, args.region or "")
        region = args.region or planned_region or _env_region()
        if not region:
            raise UsageError("no region: pass --region (or a plan with one, or set AWS_REGION)")
        checked_region(region, "region")
        aws = aws or AwsClients(load_settings())
        found = audit.find(aws, args.cluster, region)
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return AUDIT_NO_VERDICT
    except (ClientError, BotoCoreError) as exc:
        print(f"error: AWS: {error_text(exc)}; no verdict", file=sys.stderr)
        return AUDIT_NO_VERDICT
    report = audit.judge(args.cluster, region, found, expected)
    if args.output == JSON:
        json.dump(report.to_dict(), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        _print_audit(report, len(found))
    return 0 if report.clean else 1


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
                help=f"a task to run: {', '.join(TASK_ORDER)} (repeat or comma-separate; "
                     f"none = the default: {', '.join(DEFAULT_TASKS)})",
            )
        cmd.set_defaults(func=run)

    text = "print what cluster-gc would delete for the cluster, in order, and what it keeps and why; changes nothing"
    plan = commands.add_parser("plan", help=text, description=text)
    plan.add_argument("cluster", help="the Cluster API Cluster's name; without a reachable cluster object, "
                                      "the name in the resources' kubernetes.io/cluster/<name> tag")
    plan.add_argument("--region", help="AWS region (default: the cluster object's spec.region, else AWS_REGION)")
    plan.add_argument("--gc-task", action="append", metavar="TASK",
                      help=f"plan these tasks instead of the cluster object's ({', '.join(TASK_ORDER)}; "
                           "repeat or comma-separate)")
    plan.add_argument("--include-lb-controller", action="store_true",
                      help="count the AWS Load Balancer Controller's resources too "
                           "(as NODEWARDEN_GC_INCLUDE_LB_CONTROLLER=true on the hook server)")
    plan.add_argument("--output", "-o", choices=(TEXT, JSON), default=TEXT)
    plan.add_argument("--namespace", "-n", default="default", help="the cluster object's namespace (default: default)")
    plan.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    plan.set_defaults(func=run_plan)

    text = ("list what is still tagged for the cluster (tagging API and describe calls); "
            "exit 0 only when nothing is left but what the plan keeps, 1 with leftovers, 2 without a verdict")
    check = commands.add_parser("audit", help=text, description=text)
    check.add_argument("cluster", help="the cluster's name in its resources' tags (kubernetes.io/cluster/<name>)")
    check.add_argument("--region", help="AWS region (default: the plan's, else AWS_REGION)")
    check.add_argument("--expect-kept", metavar="PLAN.json",
                       help="the output of `nodewarden gc plan --output json`: what it keeps is no leftover")
    check.add_argument("--output", "-o", choices=(TEXT, JSON), default=TEXT)
    check.set_defaults(func=run_audit)
    return gc
