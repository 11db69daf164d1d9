"""Find what a cluster's controllers made in one region: instances, load balancers, ENIs, and more.

The one discovery by tag: cluster-gc asks it for what a deleted cluster left
(by task), node-detacher for the target groups and classic ELBs its nodes
may be in. Two ways, one result:

- the Resource Groups Tagging API, every page, for
  ``kubernetes.io/cluster/<name>=owned``, the VPC CNI's
  ``cluster.k8s.amazonaws.com/name=<name>`` when ENIs are asked for (and
  ``elbv2.k8s.aws/cluster=<name>`` when the AWS Load Balancer Controller's
  resources are included); what it lists is then read again from its own
  service (tags and state as they are now), since it can list resources
  deleted moments ago, and tags as they were minutes ago;
- when that API is refused or configured off, and whenever it finds nothing
  left to collect (it lags: what it omits may exist), list the load balancers and
  target groups and read their tags in chunks of 20, and ask EC2 for the
  instances, ENIs, Elastic IPs, security groups and volumes carrying the tags.

``discover_all`` answers every resource of every kind tagged for the cluster
by any of its makers' tags (hooks.teardown.ownership.cluster_tag_filters),
found both ways, so that a plan can say why each one it keeps stays; and,
apart, what the tagging API lists of kinds cluster-gc does not collect (a
VPC, a subnet, a listener), which the audit counts too.

The result is JSON (the ``observed`` of cluster-gc's decide): each resource
as ``{"kind", "id", "arn", "tags", "state"}``. Whether it is deleted is
decided from the tags and state, purely, in hooks.teardown.
"""
from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from hooks.aws.clients import error_code
from hooks.aws.gc import classic_elb, ec2, elbv2, tagging
from hooks.aws.gc.resources import parse_arn
from hooks.ec2_names import OWNED, cluster_tag
from hooks.plan import error_text
from hooks.teardown.ownership import (CNI_CLUSTER_TAG, LB_CONTROLLER_CLUSTER_TAG, cluster_tag_filters, is_candidate,
                                      made_by, tagged_for)
from hooks.teardown.tasks import (CLASSIC_ELB, EC2_INSTANCE, EIP, ELBV2_LB, ENI, SG, TASK_KINDS, TASK_ORDER, TG, VOL,
                                  deletion_order)

TAGGING_API = "tagging-api"
LISTING = "listing"
BOTH = "tagging-api+listing"  # the union of the two (discover_all, and discover once waited out)
EC2_KINDS = (EC2_INSTANCE, ENI, EIP, SG, VOL)
# The tagging API's resource type of each kind of load balancer: classic ELBs and ELBv2 ones share one.
_LOAD_BALANCER_TYPES = {TG: "elasticloadbalancing:targetgroup", CLASSIC_ELB: "elasticloadbalancing:loadbalancer",
                        ELBV2_LB: "elasticloadbalancing:loadbalancer"}


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
    # Every resource tagged for the cluster by any key of cluster_tag_filters, whoever made it.
    every_tag: bool = False
    # The describe calls' listing too, whatever the tagging API found (merged): once cluster-gc has waited out
    # its wait limit, all it lists may be given up, and its lag must not let the cluster go.
    listing_too: bool = False

    @property
    def kinds(self) -> set[str]:
        if self.only_kinds:
            return set(self.only_kinds)
        return {kind for task in self.tasks for kind in TASK_KINDS[task]}

    def wanted(self, tags: dict) -> bool:
        """Whether a listed resource's tags make it one this query is after."""
        if self.every_tag:
            return tagged_for(tags, self.cluster_name)
        return is_candidate(tags, self.cluster_name, self.include_lb_controller)

    @property
    def resource_types(self) -> tuple[str, ...]:
        """The tagging API's resource types to ask for: those of the load balancers when only they are
        wanted, else none named (every type)."""
        if not self.kinds or not self.kinds <= set(_LOAD_BALANCER_TYPES):
            return ()
        return tuple(sorted({_LOAD_BALANCER_TYPES[kind] for kind in self.kinds}))

    def tag_filters(self, kinds: set[str]) -> list[tuple[str, str | None]]:
        """The tags asked for, for ``kinds``: (key, value; None for any value)."""
        if self.every_tag:
            return list(cluster_tag_filters(self.cluster_name))
        filters: list[tuple[str, str | None]] = []
        if kinds - {ENI}:  # the CNI's ENIs carry only its own tag
            filters.append((cluster_tag(self.cluster_name), OWNED))
        if self.include_lb_controller and kinds & {ELBV2_LB, CLASSIC_ELB, TG, SG, EIP}:
            filters.append((LB_CONTROLLER_CLUSTER_TAG, self.cluster_name))
        if ENI in kinds:
            filters.append((CNI_CLUSTER_TAG, self.cluster_name))
        return filters


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
            if query.listing_too:
                return _merged(BOTH, "", _listed(aws, query), found)
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


def discover_all(aws, cluster_name: str, region: str, include_lb_controller: bool) -> dict:
    """Every resource of every kind in ``region`` tagged for the cluster by any of its makers' tags.

    Both ways, merged (``method`` "tagging-api+listing"; "listing" with
    ``fallback`` when the tagging API is refused), whatever the tasks: what
    cluster-gc would keep is in it too, so a plan (hooks.teardown.plan.plan_of)
    can say why. The AWS Load Balancer Controller's resources are found either
    way; ``include_lb_controller`` only says whether they are collected.
    Same shape as ``discover``'s result, plus ``others``: ``[{"arn", "tags"}]``
    of the kinds cluster-gc does not collect (empty when the tagging API is
    refused); raises botocore errors.
    """
    query = Query(cluster_name=cluster_name, region=region, tasks=TASK_ORDER,
                  include_lb_controller=include_lb_controller, made_by_only=False, every_tag=True)
    method, fallback, found, others = BOTH, "", [], {}
    try:
        listed = _tag_listing(aws.client("resourcegroupstaggingapi", region), query.tag_filters(query.kinds))
    except ClientError as exc:
        if error_code(exc) not in tagging.DENIED:
            raise
        method, fallback = LISTING, f"tagging API refused: {error_text(exc)}"
    else:
        found = _existing(aws, query, _candidates(listed, query.kinds))
        others = {arn: tags for arn, tags in listed.items() if parse_arn(arn) is None}
    result = _merged(method, fallback, _listed(aws, query), found)
    result["others"] = [{"arn": arn, "tags": dict(sorted(tags.items()))} for arn, tags in sorted(others.items())]
    return result


def _collectable(resources: list[dict], query: Query) -> bool:
    """Whether ``resources`` holds anything the caller is after (for cluster-gc: what it would delete)."""
    if not query.made_by_only:
        return bool(resources)
    return any(made_by(r["kind"], r["tags"], query.cluster_name, query.include_lb_controller) for r in resources)


def _merged(method: str, fallback: str, listed: list[dict], tagged: list[dict]) -> dict:
    """Both ways' records, one per resource; the tagging API's carry the ARN."""
    merged = {(r["kind"], r["id"]): r for r in listed}
    merged.update({(r["kind"], r["id"]): r for r in tagged})
    return _result(method, fallback, list(merged.values()))


def _result(method: str, fallback: str, resources: list[dict]) -> dict:
    resources.sort(key=deletion_order)
    return {"method": method, "fallback": fallback, "resources": resources}


def _record(kind: str, ident: str, arn: str, tags: dict, state: str | None = None) -> dict:
    return {"kind": kind, "id": ident, "arn": arn, "tags": dict(sorted(tags.items())), "state": state}


# --------------------------------------------------------------- tagging API


def _tagged(client, query: Query) -> dict[tuple[str, str], dict]:
    """(kind, id) -> {"arn", "tags"} of the selected kinds, from the tagging API."""
    return _candidates(_tag_listing(client, query.tag_filters(query.kinds), query.resource_types), query.kinds)


def _tag_listing(client, filters: list[tuple[str, str | None]],
                 resource_types: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """{ARN: tags} of every resource the tagging API lists with any of ``filters``, of ``resource_types``
    (none named: whatever its type)."""
    found: dict[str, dict[str, str]] = {}
    for key, value in filters:
        found.update(tagging.resources_tagged(client, key, [value] if value is not None else [], resource_types))
    return found


def _candidates(listed: dict[str, dict[str, str]], kinds: set[str]) -> dict[tuple[str, str], dict]:
    candidates: dict[tuple[str, str], dict] = {}
    for arn, tags in listed.items():
        parsed = parse_arn(arn)
        if parsed and parsed[0] in kinds:
            candidates[parsed] = {"arn": arn, "tags": tags}
    return candidates


def _existing(aws, query: Query, candidates: dict[tuple[str, str], dict]) -> list[dict]:
    """The candidates that exist and are still tagged as the query wants, with their tags (and state) as
    their own service has them now: the tagging API's may be minutes old, and a tag a user took off to keep
    a resource must count as off."""
    by_kind: dict[str, dict[str, dict]] = {}
    for (kind, ident), info in candidates.items():
        by_kind.setdefault(kind, {})[ident] = info
    region = query.region
    fresh: list[tuple[str, str, dict, str | None]] = []  # kind, id, tags, state
    if by_kind.get(ELBV2_LB) or by_kind.get(TG):
        client = aws.client("elbv2", region)
        for kind in (ELBV2_LB, TG):
            if by_kind.get(kind):  # DescribeTags leaves out what no longer exists
                fresh += [(kind, i, t, None) for i, t in elbv2.tags_of(client, list(by_kind[kind])).items()]
    if by_kind.get(CLASSIC_ELB):
        tags = classic_elb.tags_of(aws.client("elb", region), list(by_kind[CLASSIC_ELB]))
        fresh += [(CLASSIC_ELB, i, t, None) for i, t in tags.items()]
    for kind in EC2_KINDS:
        if by_kind.get(kind):
            # EC2's own answer (a terminated instance is not listed).
            found = ec2.by_id(aws.client("ec2", region), kind, list(by_kind[kind]))
            fresh += [(kind, i, f["tags"], f["state"]) for i, f in found.items()]
    return [_record(kind, ident, by_kind[kind][ident]["arn"], tags, state)
            for kind, ident, tags, state in fresh if ident in by_kind[kind] and query.wanted(tags)]


# ------------------------------------------------------------------- listing


def _listed(aws, query: Query) -> list[dict]:
    kinds, region = query.kinds, query.region
    wanted = query.wanted
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
    for kind in EC2_KINDS:
        if kind not in kinds:
            continue
        client = aws.client("ec2", region)
        found: dict[str, dict] = {}
        for key, value in query.tag_filters({kind}):
            found.update(ec2.tagged(client, kind, key, value))
        resources += [_record(kind, i, "", f["tags"], f["state"]) for i, f in found.items() if wanted(f["tags"])]
    return resources
