"""NodePools and their Machines on the local stack, as the e2e tests and bench/disruption.py make and read them."""
from __future__ import annotations

from devcluster import fleet
from devcluster.api import wait_for
from hooks.machines import names

POOLS = "/apis/nodewarden.io/v1alpha1/nodepools"
MACHINES = "/apis/nodewarden.io/v1alpha1/machines"


def pool_subnet(cloud: fleet.Aws) -> str:
    return next(s["SubnetId"] for s in cloud.ec2.describe_subnets()["Subnets"] if s["AvailabilityZone"] == fleet.ZONE)


def pool_manifest(name: str, subnet: str, replicas: int, **spec) -> dict:
    template_spec = {"instanceTypes": ["m5.large", "t3.large"], "subnets": [subnet], "imageId": fleet.IMAGE_ID}
    template_spec.update(spec.pop("template_spec", {}))
    return {"apiVersion": names.API_VERSION, "kind": names.NODEPOOL_KIND, "metadata": {"name": name},
            "spec": {"replicas": replicas, "registrationTTL": spec.pop("registrationTTL", "5m"),
                     "drainTimeout": spec.pop("drainTimeout", "60s"),
                     "template": {"metadata": {"labels": {"e2e-pool": name}}, "spec": template_spec}}}


def pool_machines(api, pool: str) -> list[dict]:
    return api.get(f"{MACHINES}?labelSelector={names.POOL_LABEL}%3D{pool}")["items"]


def condition_status(obj: dict, ctype: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def live_machines(machines: list[dict]) -> list[dict]:
    return [m for m in machines if not m["metadata"].get("deletionTimestamp")]


def pool_instances(cloud: fleet.Aws, pool: str) -> dict[str, str]:
    found = {}
    for r in cloud.ec2.describe_instances(Filters=[{"Name": f"tag:{names.TAG_POOL}", "Values": [pool]}])["Reservations"]:
        for i in r["Instances"]:
            found[i["InstanceId"]] = i["State"]["Name"]
    return found


def initialized_machines(api, pool: str, count: int) -> list[dict]:
    def check():
        live = live_machines(pool_machines(api, pool))
        ready = [m for m in live if condition_status(m, names.INITIALIZED) == "True"]
        return len(ready) == count and len(live) == count and ready
    return wait_for(check, f"{count} Machines Initialized", timeout=120)
