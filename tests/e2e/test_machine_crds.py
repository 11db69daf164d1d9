"""The NodePool and Machine CRDs on the real API server: their CEL rules, scale subresource and columns.

Only the API server's answers count here, never what the nodepool and machine
hooks do with the objects: Metacontroller serves both kinds from the start of
the session, and these tests pass the same whether its hook calls succeed or
not. Objects are deleted at the end; where no hook server route finalizes
them soon, the test takes Metacontroller's finalizer off itself.
"""
from __future__ import annotations

import copy
import uuid

import pytest

from devcluster.api import ApiError, wait_for
from hooks import machine_names, provisioning_names
from hooks.controllers import CONTROLLERS

pytestmark = pytest.mark.e2e

NODEPOOLS = "/apis/nodewarden.io/v1alpha1/nodepools"
MACHINES = "/apis/nodewarden.io/v1alpha1/machines"
JSON_PATCH = "application/json-patch+json"

TEMPLATE = {
    "instanceTypes": ["m7i.large", "m6i.large"],
    "subnets": ["subnet-0123456789abcdef0"],
    "imageId": "ami-0123456789abcdef0",
    "taints": [{"key": "dedicated", "value": "e2e", "effect": "NoSchedule"}],
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _pool(name: str, replicas: int = 0, template: dict | None = None, **spec) -> dict:
    return {"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND, "metadata": {"name": name},
            "spec": {"replicas": replicas, "template": {"spec": copy.deepcopy(template or TEMPLATE)}, **spec}}


def _machine(name: str, pool: str | None = None, **spec) -> dict:
    labels = {machine_names.POOL_LABEL: pool} if pool else {}
    return {"apiVersion": machine_names.API_VERSION, "kind": machine_names.MACHINE_KIND,
            "metadata": {"name": name, "labels": labels},
            "spec": {**copy.deepcopy(TEMPLATE), **spec}}


def _gone(api, path: str, controller: str) -> None:
    """Delete; take Metacontroller's finalizer off when no route of ours finalizes the object in time.

    These objects name made-up subnets and images: whatever the hooks make of
    them is not what these tests are about, so cleanup never waits on it long.
    """
    api.delete(path)
    if controller in CONTROLLERS:
        try:
            wait_for(lambda: api.get_or_none(path) is None, f"{path} finalized", timeout=30, interval=0.2)
            return
        except AssertionError:
            pass
    try:
        api.patch(path, {"metadata": {"finalizers": None}})
    except ApiError as exc:
        if exc.status != 404:  # gone meanwhile
            raise
    wait_for(lambda: api.get_or_none(path) is None, f"{path} deleted", timeout=30, interval=0.2)


@pytest.fixture
def made(api):
    """Create NodePools and Machines; each is deleted after the test, with the pool's Machines."""
    pools: list[str] = []
    machines: list[str] = []

    def create(obj: dict) -> dict:
        plural = NODEPOOLS if obj["kind"] == machine_names.NODEPOOL_KIND else MACHINES
        created = api.create(plural, obj)
        (pools if plural == NODEPOOLS else machines).append(obj["metadata"]["name"])
        return created

    yield create
    for pool in pools:
        selector = {"labelSelector": f"{machine_names.POOL_LABEL}={pool}"}
        machines.extend(m["metadata"]["name"] for m in api.get(MACHINES, params=selector)["items"])
        _gone(api, f"{NODEPOOLS}/{pool}", "nodepool")
    for machine in dict.fromkeys(machines):
        _gone(api, f"{MACHINES}/{machine}", "machine")


def _refused(api, path: str, obj: dict) -> str:
    with pytest.raises(ApiError) as refused:
        api.create(path, obj)
    assert refused.value.status == 422, refused.value
    return str(refused.value)


@pytest.mark.parametrize("crd", ["nodepools.nodewarden.io", "machines.nodewarden.io"])
def test_the_crds_are_established(api, crd):
    obj = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
    conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
    assert conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True"
    assert conditions.get("NonStructuralSchema") != "True"


def test_a_nodepool_and_a_machine_are_accepted_and_defaulted(api, made):
    pool = made(_pool(unique("e2e-np")))
    assert pool["spec"]["registrationTTL"] == "15m" and pool["spec"]["drainTimeout"] == "10m"
    machine = made(_machine(unique("e2e-m"), pool=pool["metadata"]["name"], labels={"team": "e2e"}))
    assert machine["spec"]["registrationTTL"] == "15m" and machine["spec"]["drainTimeout"] == "10m"
    assert machine["spec"]["instanceTypes"] == TEMPLATE["instanceTypes"]


def test_a_nodepool_without_replicas_has_none(api, made):
    """No default: a pool written without replicas is a provisioning pool, and may leave its instance types to
    its requirements."""
    pool = _pool(unique("e2e-np"))
    del pool["spec"]["replicas"]
    assert "replicas" not in made(pool)["spec"]
    del pool["spec"]["template"]["spec"]["instanceTypes"]
    pool["metadata"]["name"] = unique("e2e-np")
    assert "instanceTypes" not in made(pool)["spec"]["template"]["spec"]


def test_a_static_pool_needs_instance_types(api, made):
    template = {k: v for k, v in TEMPLATE.items() if k != "instanceTypes"}
    why = "a static pool (replicas set) needs template.spec.instanceTypes"
    assert why in _refused(api, NODEPOOLS, _pool(unique("e2e-np"), replicas=1, template=template))
    name = unique("e2e-np")
    made(_pool(name, replicas=0))
    with pytest.raises(ApiError) as refused:
        api.patch(f"{NODEPOOLS}/{name}", [{"op": "remove", "path": "/spec/template/spec/instanceTypes"}], JSON_PATCH)
    assert refused.value.status == 422 and why in str(refused.value), refused.value


def test_removing_replicas_turns_a_static_pool_into_a_provisioning_pool(api, made):
    """As docs/upgrading.md says: one JSON patch, and its Machines keep their template."""
    name = unique("e2e-np")
    made(_pool(name, replicas=0))
    api.patch(f"{NODEPOOLS}/{name}", [{"op": "remove", "path": "/spec/replicas"}], JSON_PATCH)
    assert "replicas" not in api.get(f"{NODEPOOLS}/{name}")["spec"]


PROVISIONING = {
    "weight": 100,
    "requirements": [
        {"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["t3.nano", "t3.micro"]},
        {"key": "nodewarden.io/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
        {"key": "nodewarden.io/instance-cpu", "operator": "Gt", "values": ["3"]},
        {"key": "nodewarden.io/instance-memory", "operator": "Lt", "values": ["65537"]},
        {"key": "example.com/dedicated", "operator": "Exists"},
        {"key": "nodewarden.io/instance-gpu-count", "operator": "DoesNotExist"},
    ],
    "limits": {"cpu": 1000, "memory": "4000Gi", "machines": 50},
    "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m",
                   "budgets": [{"nodes": "1", "reasons": ["Empty", "Underutilized"]}]},
}


def test_a_full_provisioning_pool_is_accepted_as_written(api, made):
    pool = _pool(unique("e2e-np"), **PROVISIONING)
    del pool["spec"]["replicas"]
    spec = made(pool)["spec"]
    assert {k: spec[k] for k in PROVISIONING} == PROVISIONING


@pytest.mark.parametrize("change, why", [
    ({"weight": 101}, "100"),
    ({"requirements": [{"key": "kubernetes.io/arch", "operator": "In"}]}, "In and NotIn need at least one value"),
    ({"requirements": [{"key": "kubernetes.io/arch", "operator": "NotIn", "values": []}]},
     "In and NotIn need at least one value"),
    ({"requirements": [{"key": "example.com/gpu", "operator": "Exists", "values": ["yes"]}]},
     "Exists and DoesNotExist take no values"),
    ({"requirements": [{"key": "nodewarden.io/instance-cpu", "operator": "Gt", "values": ["3", "4"]}]},
     "Gt and Lt need exactly one whole number"),
    ({"requirements": [{"key": "nodewarden.io/instance-cpu", "operator": "Lt", "values": ["four"]}]},
     "Gt and Lt need exactly one whole number"),
    ({"requirements": [{"key": "nodewarden.io/nodepool", "operator": "In", "values": ["other"]}]},
     "only the well-known ones"),
    ({"requirements": [{"key": "nodewarden.io/capacity-type", "operator": "In", "values": ["reserved"]}]},
     "the capacity types are on-demand and spot"),
    ({"requirements": [{"key": "kubernetes.io/arch", "operator": "Within", "values": ["amd64"]}]}, "Unsupported value"),
    ({"requirements": [{"key": "bad key", "operator": "Exists"}]}, "should match"),
    ({"limits": {"cpu": "lots"}}, "should match"),
    ({"limits": {"cpu": -4}}, "cpu must be at least 0"),
    ({"limits": {"machines": 10001}}, "10000"),
    ({"disruption": {"consolidationPolicy": "WhenIdle"}}, "Unsupported value"),
    ({"disruption": {"consolidateAfter": "soon"}}, "should match"),
])
def test_a_malformed_provisioning_field_is_refused(api, change, why):
    pool = _pool(unique("e2e-np"), **change)
    del pool["spec"]["replicas"]
    message = _refused(api, NODEPOOLS, pool)
    assert why in message, message


def test_a_machine_may_carry_the_pods_it_was_provisioned_for(made):
    """The pool writes nodewarden.io/provisioned-for in the Machine's metadata when it creates it: nothing
    refuses it there (the nodewarden.io/ rules hold for the spec's labels and annotations)."""
    machine = _machine(unique("e2e-m"))
    value = '{"more":0,"pods":["default/web-0"]}'
    machine["metadata"]["annotations"] = {provisioning_names.PROVISIONED_FOR: value}
    assert made(machine)["metadata"]["annotations"][provisioning_names.PROVISIONED_FOR] == value


def test_a_machine_spec_cannot_change(api, made):
    name = unique("e2e-m")
    made(_machine(name))
    for change in ({"instanceTypes": ["c7i.large"]}, {"labels": {"added": "later"}}, {"drainTimeout": "20m"}):
        with pytest.raises(ApiError) as refused:
            api.patch(f"{MACHINES}/{name}", {"spec": change})
        assert refused.value.status == 422 and "spec is immutable" in str(refused.value), refused.value
    assert api.get(f"{MACHINES}/{name}")["spec"]["instanceTypes"] == TEMPLATE["instanceTypes"]
    # Metadata and status stay writable: the pool label, Metacontroller's finalizer and the hooks' status.
    api.patch(f"{MACHINES}/{name}", {"metadata": {"labels": {"e2e": "relabelled"}}})


def test_a_nodepool_template_may_change(api, made):
    name = unique("e2e-np")
    made(_pool(name))
    api.patch(f"{NODEPOOLS}/{name}", {"spec": {"template": {"spec": {"instanceTypes": ["c7i.large"]}}}})
    assert api.get(f"{NODEPOOLS}/{name}")["spec"]["template"]["spec"]["instanceTypes"] == ["c7i.large"]


def test_a_machine_with_both_an_image_and_a_launch_template_is_refused(api):
    both = _machine(unique("e2e-m"), launchTemplate={"name": "nodes", "version": "$Latest"})
    assert "exactly one of imageId and launchTemplate" in _refused(api, MACHINES, both)
    neither = _machine(unique("e2e-m"))
    del neither["spec"]["imageId"]
    assert "exactly one of imageId and launchTemplate" in _refused(api, MACHINES, neither)


def test_a_launch_template_alone_is_accepted_by_id_or_name_but_not_both(api, made):
    by_name = _machine(unique("e2e-m"), launchTemplate={"name": "nodes"})
    del by_name["spec"]["imageId"]
    made(by_name)
    both = _machine(unique("e2e-m"), launchTemplate={"id": "lt-0123", "name": "nodes"})
    del both["spec"]["imageId"]
    assert "exactly one of id and name" in _refused(api, MACHINES, both)


def test_subnets_or_a_subnet_selector_are_required(api, made):
    none = _machine(unique("e2e-m"), subnets=[])
    assert "set subnets, subnetSelector or both" in _refused(api, MACHINES, none)
    template = {**TEMPLATE}
    del template["subnets"]
    assert "set subnets, subnetSelector or both" in _refused(api, NODEPOOLS, _pool(unique("e2e-np"), template=template))
    made(_pool(unique("e2e-np"), template={**template, "subnetSelector": {"kubernetes.io/role/internal-elb": "*"}}))


def test_a_nodepool_template_needs_exactly_one_image_source(api):
    template = {**TEMPLATE, "launchTemplate": {"id": "lt-0123"}}
    assert "exactly one of imageId and launchTemplate" in _refused(api, NODEPOOLS, _pool(unique("e2e-np"),
                                                                                         template=template))


def test_a_name_longer_than_a_label_value_is_refused(api, made):
    """A NodePool's name is its Machines' and Nodes' nodewarden.io/nodepool label, a Machine's its Node's
    nodewarden.io/machine: at most 63 characters."""
    too_long = "e2e-" + "x" * 60
    assert "at most 63 characters" in _refused(api, NODEPOOLS, _pool(too_long))
    assert "at most 63 characters" in _refused(api, MACHINES, _machine(too_long))
    made(_pool(too_long[:63]))


@pytest.mark.parametrize("where", ["pool-label", "pool-annotation", "machine-label", "machine-annotation",
                                   "pool-taint", "machine-startup-taint"])
def test_keys_in_nodewardens_domain_are_refused(api, where):
    """nodewarden.io/machine on a Node is how its Machine finds it: no spec may set a key of ours."""
    ours = {machine_names.MACHINE_LABEL: "another"}
    taint = [{"key": machine_names.UNREGISTERED_TAINT, "effect": "NoExecute"}]
    if where.startswith("pool"):
        pool = _pool(unique("e2e-np"))
        template = pool["spec"]["template"]
        if where == "pool-taint":
            template["spec"]["taints"] = taint
        else:
            template["metadata"] = {"labels" if where == "pool-label" else "annotations": ours}
        path, obj = NODEPOOLS, pool
    elif where == "machine-startup-taint":
        path, obj = MACHINES, _machine(unique("e2e-m"), startupTaints=taint)
    else:
        path, obj = MACHINES, _machine(unique("e2e-m"), **{"labels" if where == "machine-label" else "annotations": ours})
    assert "nodewarden.io/ domain" in _refused(api, path, obj)


@pytest.mark.parametrize("field", ["registrationTTL", "drainTimeout"])
@pytest.mark.parametrize("value, why", [
    ("0s", "must be longer than 0s"),
    ("25h", "at most 24h"),
    ("15 minutes", "should match"),
    ("-5m", "should match"),
])
def test_a_bad_duration_is_refused(api, field, value, why):
    for path, obj in ((MACHINES, _machine(unique("e2e-m"), **{field: value})),
                      (NODEPOOLS, _pool(unique("e2e-np"), **{field: value}))):
        message = _refused(api, path, obj)
        assert field in message and why in message, message


def test_a_good_compound_duration_is_accepted(api, made):
    made(_machine(unique("e2e-m"), registrationTTL="1h30m", drainTimeout="90s"))


def test_kubectl_scale_nodepool_goes_through_the_scale_subresource(api, cluster, made):
    name = unique("e2e-np")
    made(_pool(name))
    cluster.kubectl("scale", f"nodepool/{name}", "--replicas=3")
    assert api.get(f"{NODEPOOLS}/{name}")["spec"]["replicas"] == 3
    scale = api.get(f"{NODEPOOLS}/{name}/scale")
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 3)
    cluster.kubectl("scale", f"np/{name}", "--replicas=0")  # the short name, back to none
    assert api.get(f"{NODEPOOLS}/{name}")["spec"]["replicas"] == 0
    # The scale subresource is checked against the same schema: at most 1000.
    refused = cluster.kubectl("scale", f"nodepool/{name}", "--replicas=1001", check=False)
    assert refused.returncode != 0 and "1000" in refused.stderr, refused.stderr
    header = cluster.kubectl("get", "nodepools", name).stdout.splitlines()[0].split()
    assert header == ["NAME", "REPLICAS", "READY", "DISRUPTING", "PENDING", "AGE"]


def test_kubectl_get_nodepools_shows_which_pools_provision(cluster, made):
    name = unique("e2e-np")
    pool = _pool(name, weight=30)
    del pool["spec"]["replicas"]
    made(pool)
    header, row = cluster.kubectl("get", "nodepools", name, "-o", "wide").stdout.splitlines()[:2]
    assert header.split() == ["NAME", "REPLICAS", "READY", "DISRUPTING", "PENDING", "AGE", "WEIGHT"]
    # Cells by the header's columns: kubectl leaves a missing value blank.
    starts = [header.index(column) for column in header.split()] + [None]
    cells = {column: row[start:end].strip() for column, start, end in zip(header.split(), starts, starts[1:])}
    assert (cells["NAME"], cells["REPLICAS"], cells["WEIGHT"]) == (name, "", "30")  # no replicas: provisioning


def test_kubectl_get_machines_shows_the_machine_columns(cluster, made):
    pool = unique("e2e-np")
    name = unique("e2e-m")
    made(_machine(name, pool=pool))
    lines = cluster.kubectl("get", "machines", name).stdout.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "ZONE", "NODE", "READY", "DISRUPTION", "AGE"]
    assert lines[1].split()[0] == name
    wide = cluster.kubectl("get", "machines", name, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "TYPE", "ZONE", "NODE", "READY", "DISRUPTION", "AGE", "INSTANCE", "POOL"]
    assert wide[1].split()[-1] == pool  # the POOL column reads the label, whatever the status says
    # The nodewarden category lists both kinds.
    assert name in cluster.kubectl("get", "nodewarden", "-o", "name").stdout


def _can_i(cluster, verb: str, resource: str, subresource: str = "") -> bool:
    """Ask the API server as the hook server's ServiceAccount (its own token)."""
    args = ["auth", "can-i", verb, resource] + ([f"--subresource={subresource}"] if subresource else [])
    if subresource == "eviction":
        args.append("--namespace=default")
    elif resource == "pods":
        args.append("--all-namespaces")  # a provisioning pool lists the pending pods of every namespace
    result = cluster.kubectl(*args, check=False, kubeconfig_path=cluster.layout.hooks_kubeconfig)
    assert result.stdout.strip() in ("yes", "no"), result.stderr
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize("verb, resource, subresource", [
    ("get", "nodepools.nodewarden.io", ""), ("watch", "machines.nodewarden.io", ""),
    ("delete", "machines.nodewarden.io", ""), ("patch", "machines.nodewarden.io", ""),
    ("list", "fencingrequests.nodewarden.io", ""), ("delete", "nodes", ""), ("patch", "nodes", ""),
    ("create", "pods", "eviction"), ("list", "volumeattachments.storage.k8s.io", ""),
    ("list", "nodepools.nodewarden.io", ""), ("list", "machines.nodewarden.io", ""), ("list", "nodes", ""),
    ("list", "daemonsets.apps", ""), ("list", "pods", ""), ("create", "events", ""),
])
def test_the_hook_server_may_do_what_the_machine_hooks_do(cluster, verb, resource, subresource):
    assert _can_i(cluster, verb, resource, subresource)


@pytest.mark.parametrize("verb, resource, subresource", [
    ("create", "machines.nodewarden.io", ""), ("update", "machines.nodewarden.io", "status"),
    ("patch", "nodepools.nodewarden.io", ""), ("update", "nodepools.nodewarden.io", "scale"),
    ("delete", "nodepools.nodewarden.io", ""),
])
def test_metacontroller_alone_writes_machines_and_nodepools(cluster, verb, resource, subresource):
    assert not _can_i(cluster, verb, resource, subresource)
