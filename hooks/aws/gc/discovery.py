"""Find what a cluster's controllers made in one region: load balancers, target groups, and more.

The one discovery by tag: cluster-gc asks it for what a deleted cluster left
(by task), node-detacher for the target groups and classic ELBs its nodes
may be in. Two ways, one result:

- the Resource Groups Tagging API, every page, for
  ``kubernetes.io/cluster/<name>=owned`` (and ``elbv2.k8s.aws/cluster=<name>``
  when the AWS Load Balancer Controller's resources are included); what it
  lists is then checked to exist, since it can list resources deleted moments
  ago;
- when that API is refused or configured off, and whenever it finds nothing
  left to collect (it lags: what it omits may exist), list the load balancers and
  target groups and read their tags in chunks of 20, and ask EC2 for the
  security groups and volumes carrying the tags.

The result is JSON (the ``observed`` of cluster-gc's decide): each resource
as ``{"kind", "id", "arn", "tags", "state"}``. Whether it is deleted is
decided from the tags, purely, in hooks.teardown.
"""
from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from hooks.aws.clients import error_code
from hooks.aws.gc import classic_elb, ec2, elbv2, tagging
from hooks.aws.gc.resources import parse_arn
from hooks.ec2_names import OWNED, cluster_tag
from hooks.plan import error_text
from hooks.teardown.ownership import LB_CONTROLLER_CLUSTER_TAG, is_candidate, made_by
from hooks.teardown.tasks import CLASSIC_ELB, ELBV2_LB, KIND_TASK, SG, TASK_KINDS, TASK_ORDER, TG, VOL

TAGGING_API = "tagging-api"
LISTING = "listing"


@dataclass(frozen=True)
class Query:
    cluster_name: str
    region: str
    tasks: tuple[str, ...] = ()
    include_lb_controller: bool = False
    use_tagging_api: bool = True
    # Kinds to find instead of those of ``tasks`` (node-detacher: target groups and classic ELBs).
    only_kinds: tuple[str, ...] = ()
    # cluster-gc counts only what a controller of the cluster made as "something
    # left"; node-detacher counts every load balancer tagged for the cluster.
    made_by_only: bool = True

    @property
    def kinds(self) -> set[str]:
        if self.only_kinds:
            return set(self.only_kinds)
        return {kind for task in self.tasks for kind in TASK_KINDS[task]}


def discover(aws, query: Query) -> dict:
    """{"method", "fallback", "resources"}; raises botocore errors it cannot work around."""
    fallback = "tagging API configured off"
    if query.use_tagging_api:
        try:
            candidates = _tagged(aws.client("resourcegroupstaggingapi", query.region), query)
        except ClientError as exc:
            if error_code(exc) not in tagging.DENIED:
                raise
            fallback = f"tagging API refused: {error_text(exc)}"
        else:
            found = _existing(aws, query, candidates)
            if _collectable(found, query):
                return _result(TAGGING_API, "", found)
            # The tagging API lags behind the services (a resource made moments
            # ago may not be listed yet), so "nothing left to collect" is never
            # taken from it alone: the listing must agree before anything is
            # finalized. What it lists but nobody collects (CAPA's own security
            # groups, say) does not count as "something left".
            listed = _listed(aws, query)
            if not _collectable(listed, query):
                return _result(TAGGING_API, "", found)
            return _result(LISTING, f"tagging API listed nothing to collect, listing found {len(listed)}", listed)
    return _result(LISTING, fallback, _listed(aws, query))


def _collectable(resources: list[dict], query: Query) -> bool:
    """Whether ``resources`` holds anything the caller is after (for cluster-gc: what it would delete)."""
    if not query.made_by_only:
        return bool(resources)
    return any(made_by(r["kind"], r["tags"], query.cluster_name, query.include_lb_controller) for r in resources)


def _result(method: str, fallback: str, resources: list[dict]) -> dict:
    order = {task: i for i, task in enumerate(TASK_ORDER)}
    resources.sort(key=lambda r: (order[KIND_TASK[r["kind"]]], r["kind"], r["id"]))
    return {"method": method, "fallback": fallback, "resources": resources}


def _record(kind: str, ident: str, arn: str, tags: dict, state: str | None = None) -> dict:
    return {"kind": kind, "id": ident, "arn": arn, "tags": dict(sorted(tags.items())), "state": state}


# --------------------------------------------------------------- tagging API


def _tagged(client, query: Query) -> dict[tuple[str, str], dict]:
    """(kind, id) -> {"arn", "tags"} of the selected kinds, from the tagging API."""
    found = tagging.resources_tagged(client, cluster_tag(query.cluster_name), [OWNED])
    if query.include_lb_controller:
        found.update(tagging.resources_tagged(client, LB_CONTROLLER_CLUSTER_TAG, [query.cluster_name]))
    kinds = query.kinds
    candidates: dict[tuple[str, str], dict] = {}
    for arn, tags in found.items():
        parsed = parse_arn(arn)
        if parsed and parsed[0] in kinds:
            candidates[parsed] = {"arn": arn, "tags": tags}
    return candidates


def _existing(aws, query: Query, candidates: dict[tuple[str, str], dict]) -> list[dict]:
    """The candidates that exist, one listing per kind that has any."""
    by_kind: dict[str, dict[str, dict]] = {}
    for (kind, ident), info in candidates.items():
        by_kind.setdefault(kind, {})[ident] = info
    region = query.region
    resources: list[dict] = []
    if by_kind.get(ELBV2_LB) or by_kind.get(TG):
        client = aws.client("elbv2", region)
        if by_kind.get(ELBV2_LB):
            alive = set(elbv2.load_balancer_arns(client))
            resources += [_record(ELBV2_LB, i, c["arn"], c["tags"]) for i, c in by_kind[ELBV2_LB].items() if i in alive]
        if by_kind.get(TG):
            alive = set(elbv2.target_group_arns(client))
            resources += [_record(TG, i, c["arn"], c["tags"]) for i, c in by_kind[TG].items() if i in alive]
    if by_kind.get(CLASSIC_ELB):
        alive = set(classic_elb.load_balancer_names(aws.client("elb", region)))
        resources += [
            _record(CLASSIC_ELB, i, c["arn"], c["tags"]) for i, c in by_kind[CLASSIC_ELB].items() if i in alive
        ]
    if by_kind.get(SG) or by_kind.get(VOL):
        client = aws.client("ec2", region)
        if by_kind.get(SG):
            for ident, found in ec2.security_groups_by_id(client, list(by_kind[SG])).items():
                resources.append(_record(SG, ident, by_kind[SG][ident]["arn"], found["tags"]))
        if by_kind.get(VOL):
            for ident, found in ec2.volumes_by_id(client, list(by_kind[VOL])).items():
                resources.append(_record(VOL, ident, by_kind[VOL][ident]["arn"], found["tags"], found["state"]))
    return resources


# ------------------------------------------------------------------- listing


def _listed(aws, query: Query) -> list[dict]:
    kinds, region, name = query.kinds, query.region, query.cluster_name

    def wanted(tags: dict) -> bool:
        return is_candidate(tags, name, query.include_lb_controller)

    resources: list[dict] = []
    if kinds & {ELBV2_LB, TG}:
        client = aws.client("elbv2", region)
        if ELBV2_LB in kinds:
            tags = elbv2.tags_of(client, elbv2.load_balancer_arns(client))
            resources += [_record(ELBV2_LB, arn, arn, t) for arn, t in tags.items() if wanted(t)]
        if TG in kinds:
            tags = elbv2.tags_of(client, elbv2.target_group_arns(client))
            resources += [_record(TG, arn, arn, t) for arn, t in tags.items() if wanted(t)]
    if CLASSIC_ELB in kinds:
        client = aws.client("elb", region)
        tags = classic_elb.tags_of(client, classic_elb.load_balancer_names(client))
        resources += [_record(CLASSIC_ELB, n, "", t) for n, t in tags.items() if wanted(t)]
    if kinds & {SG, VOL}:
        client = aws.client("ec2", region)
        if SG in kinds:
            groups = ec2.security_groups_tagged(client, cluster_tag(name), OWNED)
            if query.include_lb_controller:
                groups.update(ec2.security_groups_tagged(client, LB_CONTROLLER_CLUSTER_TAG, name))
            resources += [_record(SG, i, "", g["tags"]) for i, g in groups.items() if wanted(g["tags"])]
        if VOL in kinds:
            volumes = ec2.volumes_tagged(client, cluster_tag(name), OWNED)
            resources += [_record(VOL, i, "", v["tags"], v["state"]) for i, v in volumes.items() if wanted(v["tags"])]
    return resources
