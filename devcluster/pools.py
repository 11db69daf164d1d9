"""NodePools and their Machines on the local stack, as the e2e tests and bench/disruption.py make and read them."""
from __future__ import annotations

from devcluster import fleet
from devcluster.api import wait_for
from hooks import machine_names

POOLS = "/apis/nodewarden.io/v1alpha1/nodepools"
MACHINES = "/apis/nodewarden.io/v1alpha1/machines"


def pool_subnet(cloud: fleet.Aws, zone: str = fleet.ZONE) -> str:
    """The default subnet of ``zone``: moto's default VPC has one in each of the region's zones."""
    return next(s["SubnetId"] for s in cloud.ec2.describe_subnets(
        Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"] if s["AvailabilityZone"] == zone)


def pool_manifest(name: str, subnet: str, replicas: int, **spec) -> dict:
    template_spec = {"instanceTypes": ["m5.large", "t3.large"], "subnets": [subnet], "imageId": fleet.IMAGE_ID}
    template_spec.update(spec.pop("template_spec", {}))
    return {"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND, "metadata": {"name": name},
            "spec": {"replicas": replicas, "registrationTTL": spec.pop("registrationTTL", "5m"),
                     "drainTimeout": spec.pop("drainTimeout", "60s"),
                     "template": {"metadata": {"labels": {"e2e-pool": name}}, "spec": template_spec}}}


def provisioning_pool_manifest(name: str, subnets: list[str], *, requirements: list[dict],
                               limits: dict | None = None, disruption: dict | None = None, **spec) -> dict:
    """A NodePool without replicas: it launches Machines for the pending pods that select it
    (its label ``e2e-pool: <name>``) and fit its requirements."""
    pool = pool_manifest(name, subnets[0], 0, **spec)
    del pool["spec"]["replicas"]
    template = pool["spec"]["template"]["spec"]
    template["subnets"] = list(subnets)
    if "instanceTypes" not in spec.get("template_spec", {}):
        del template["instanceTypes"]
    pool["spec"]["requirements"] = requirements
    if limits is not None:
        pool["spec"]["limits"] = limits
    if disruption is not None:
        pool["spec"]["disruption"] = disruption
    return pool


def pool_machines(api, pool: str) -> list[dict]:
    return api.get(f"{MACHINES}?labelSelector={machine_names.POOL_LABEL}%3D{pool}")["items"]


def condition_status(obj: dict, ctype: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def live_machines(machines: list[dict]) -> list[dict]:
    return [m for m in machines if not m["metadata"].get("deletionTimestamp")]


def pool_instance_tags(cloud: fleet.Aws, pool: str) -> dict[str, dict[str, str]]:
    """Every instance launched for the pool, terminated ones too: instance id -> its tags and its ``state``."""
    found = {}
    pages = cloud.ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{machine_names.TAG_POOL}", "Values": [pool]}])
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
                found[instance["InstanceId"]] = {**tags, "state": instance["State"]["Name"]}
    return found


def pool_instances(cloud: fleet.Aws, pool: str) -> dict[str, str]:
    """Instance id -> state, of every instance launched for the pool."""
    return {instance: tags["state"] for instance, tags in pool_instance_tags(cloud, pool).items()}


def initialized_machines(api, pool: str, count: int) -> list[dict]:
    def check():
        live = live_machines(pool_machines(api, pool))
        ready = [m for m in live if condition_status(m, machine_names.INITIALIZED) == "True"]
        return len(ready) == count and len(live) == count and ready
    return wait_for(check, f"{count} Machines Initialized", timeout=120)
