"""The NodePool and Machine CRDs against the fields the machine hooks rely on (offline).

The API server prunes every field a CRD's schema does not name, so a status
field missing here would vanish from every sync's answer without an error.
These tests read the YAML files as they are (no kustomize, no API server);
tests/e2e/test_machine_crds.py checks the CEL rules on a real API server.
"""
from __future__ import annotations

import pathlib
import re

import jsonschema
import pytest
import yaml

from hooks import machine_names

CRDS = pathlib.Path(__file__).parents[2] / "kustomize" / "base" / "crds"

TEMPLATE_FIELDS = {
    "taints": "array", "startupTaints": "array", "instanceTypes": "array", "capacityType": "string", "subnets": "array",
    "subnetSelector": "object", "securityGroups": "array", "imageId": "string", "launchTemplate": "object",
    "instanceProfile": "string", "userData": "string",
}
MACHINE_ONLY_FIELDS = {"labels": "object", "annotations": "object", "registrationTTL": "string",
                       "drainTimeout": "string"}
CONDITION_FIELDS = {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}
DURATION_DEFAULTS = {"registrationTTL": "15m", "drainTimeout": "10m"}


def _load(name: str) -> dict:
    [crd] = [d for d in yaml.safe_load_all((CRDS / name).read_text()) if d]
    return crd


@pytest.fixture(scope="module")
def nodepool() -> dict:
    return _load("nodepools.yaml")


@pytest.fixture(scope="module")
def machine() -> dict:
    return _load("machines.yaml")


def _schema(crd: dict) -> dict:
    [version] = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def _template_spec(nodepool: dict) -> dict:
    return _schema(nodepool)["properties"]["spec"]["properties"]["template"]["properties"]["spec"]


def _rules(schema: dict) -> list[str]:
    return [v["rule"] for v in schema.get("x-kubernetes-validations", [])]


def _walk(schema: dict, path: str = ""):
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


def test_both_kinds_match_the_names_module(nodepool, machine):
    for crd, kind in ((nodepool, machine_names.NODEPOOL_KIND), (machine, machine_names.MACHINE_KIND)):
        assert crd["spec"]["group"] == machine_names.GROUP
        assert f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}" == machine_names.API_VERSION
        assert crd["spec"]["names"]["kind"] == kind
        assert crd["spec"]["scope"] == "Cluster"
        assert crd["spec"]["versions"][0]["subresources"]["status"] == {}
    pool_column = next(c for c in machine["spec"]["versions"][0]["additionalPrinterColumns"] if c["name"] == "Pool")
    assert pool_column["jsonPath"] == ".metadata.labels." + machine_names.POOL_LABEL.replace(".", r"\.")


def test_the_nodepool_spec_has_the_contract_fields(nodepool):
    spec = _schema(nodepool)["properties"]["spec"]
    replicas = spec["properties"]["replicas"]
    # No default: a pool written without replicas is a provisioning pool.
    assert (replicas["type"], replicas["minimum"], replicas["maximum"], replicas.get("default")) == \
        ("integer", 0, 1000, None)
    for field, default in DURATION_DEFAULTS.items():
        assert spec["properties"][field]["default"] == default
    template = spec["properties"]["template"]["properties"]
    for field in ("labels", "annotations"):
        assert template["metadata"]["properties"][field]["additionalProperties"]["type"] == "string"
    assert "template" in spec["required"] and "spec" in spec["properties"]["template"]["required"]


@pytest.mark.parametrize("where", ["nodepool", "machine"])
def test_the_template_fields_are_there_with_their_types(nodepool, machine, where):
    spec = _template_spec(nodepool) if where == "nodepool" else _schema(machine)["properties"]["spec"]
    expected = TEMPLATE_FIELDS if where == "nodepool" else {**TEMPLATE_FIELDS, **MACHINE_ONLY_FIELDS}
    assert {k: v["type"] for k, v in spec["properties"].items()} == expected
    props = spec["properties"]
    # A provisioning pool's template may leave the instance types to its requirements.
    assert spec.get("required") == (None if where == "nodepool" else ["instanceTypes"])
    assert (props["instanceTypes"]["minItems"], props["instanceTypes"]["maxItems"]) == (1, 20)
    assert props["subnets"]["maxItems"] == 16 and props["securityGroups"]["maxItems"] == 16
    assert props["userData"]["maxLength"] == 16384
    assert props["subnetSelector"]["additionalProperties"]["type"] == "string"
    assert set(props["launchTemplate"]["properties"]) == {"id", "name", "version"}
    for field in ("taints", "startupTaints"):
        taint = props[field]["items"]
        assert props[field]["maxItems"] == 50
        assert set(taint["properties"]) == {"key", "value", "effect"} and set(taint["required"]) == {"key", "effect"}
        assert taint["properties"]["effect"]["enum"] == ["NoSchedule", "PreferNoSchedule", "NoExecute"]
    rules = _rules(spec)
    assert "has(self.imageId) != has(self.launchTemplate)" in rules
    assert any("self.subnets" in r and "self.subnetSelector" in r and "||" in r for r in rules)


def test_the_nodepool_template_and_the_machine_spec_stay_the_same(nodepool, machine):
    """A NodePool's template becomes its Machines' spec: a field one allows and the other refuses fails launches."""
    template = _template_spec(nodepool)
    spec = _schema(machine)["properties"]["spec"]
    for field in TEMPLATE_FIELDS:
        assert template["properties"][field] == spec["properties"][field], field
    for field in DURATION_DEFAULTS:
        pool_field = dict(_schema(nodepool)["properties"]["spec"]["properties"][field], description="")
        assert pool_field == dict(spec["properties"][field], description=""), field
    assert set(_rules(template)) == set(_rules(spec)) - {"self == oldSelf"}


def test_the_machine_spec_is_immutable_and_the_pool_template_is_not(nodepool, machine):
    assert "self == oldSelf" in _rules(_schema(machine)["properties"]["spec"])
    for _, sub in _walk(_schema(nodepool)):
        assert "oldSelf" not in " ".join(_rules(sub))


@pytest.mark.parametrize("crd_name", ["nodepools.yaml", "machines.yaml"])
def test_durations_are_checked_like_the_fencing_request_ones(crd_name):
    """The same pattern as FencingRequest's durations, then CEL bounds; the defaults pass both."""
    fencing_timeout = _schema(_load("fencingrequests.yaml"))["properties"]["spec"]["properties"]["timeout"]
    spec = _schema(_load(crd_name))["properties"]["spec"]["properties"]
    for field, default in DURATION_DEFAULTS.items():
        schema = spec[field]
        assert schema["pattern"] == fencing_timeout["pattern"]
        assert schema["maxLength"] == fencing_timeout["maxLength"]
        [rule] = _rules(schema)
        assert re.fullmatch(r"duration\(self\) > duration\('0s'\) && duration\(self\) <= duration\('\w+'\)", rule)
        assert re.fullmatch(schema["pattern"], default)


def test_the_nodepool_status_has_the_contract_fields(nodepool):
    status = _schema(nodepool)["properties"]["status"]["properties"]
    assert set(status) == {"observedGeneration", "replicas", "machines", "leakedInstancesTerminated",
                           "lastLeakCheck", "conditions", "disruption", "disruptions", "provisioning",
                           "consolidation"}
    provisioning = status["provisioning"]["properties"]
    assert set(provisioning) == {"pendingPods", "unschedulablePods", "inFlight", "resources", "limits", "lastRound",
                                 "image"}
    assert set(provisioning["image"]["properties"]) == {"id", "architecture", "error"}
    for field in ("inFlight", "resources", "limits"):
        assert {k: v["type"] for k, v in provisioning[field]["properties"].items()} == \
            {"machines": "integer", "cpu": "string", "memory": "string"}
    assert provisioning["lastRound"]["format"] == "date-time"
    assert set(status["consolidation"]["items"]["properties"]) == {"machine", "uid", "reason", "since"}
    # The API server prunes what the schema lacks: every field of a disruption record must be in it.
    from hooks.nodepools import records
    assert set(status["disruptions"]["items"]["properties"]) == set(records.RECORD_KEYS)
    assert set(status["disruption"]["properties"]) == {"disrupting", "allowed", "blocked"}
    assert tuple(status["machines"]["properties"]) == machine_names.PHASES
    assert all(v["type"] == "integer" for v in status["machines"]["properties"].values())
    assert status["lastLeakCheck"]["format"] == "date-time"
    assert set(status["conditions"]["items"]["properties"]) == CONDITION_FIELDS


def test_the_machine_status_has_the_contract_fields(machine):
    status = _schema(machine)["properties"]["status"]["properties"]
    assert set(status) == {
        "observedGeneration", "providerID", "instanceID", "instanceType", "zone", "nodeName", "nodeUID",
        "capacity", "allocatable", "launchRequestedAt", "launchRefusals", "launchedAt", "imageId", "termination",
        "lastError", "conditions",
    }
    # The API server prunes what the schema lacks: every field of a refusal must be in it.
    from hooks.machines import launch
    refusal = status["launchRefusals"]["items"]
    assert tuple(refusal["properties"]) == launch.REFUSAL_KEYS and refusal["required"] == list(launch.REFUSAL_KEYS)
    assert refusal["properties"]["at"]["format"] == "date-time"
    for field in ("capacity", "allocatable"):
        assert status[field]["additionalProperties"]["type"] == "string"
    for field in ("launchRequestedAt", "launchedAt"):
        assert status[field]["format"] == "date-time"
    termination = status["termination"]["properties"]
    steps = {"startedAt", "cordonedAt", "drainedAt", "volumesDetachedAt", "terminateRequestedAt",
             "instanceTerminatedAt", "instanceReleasedAt", "nodeDeletedAt"}
    assert set(termination) == steps | {"evictions"}
    assert all(termination[s]["format"] == "date-time" for s in steps)
    assert termination["evictions"]["type"] == "integer"
    assert set(status["conditions"]["items"]["properties"]) == CONDITION_FIELDS
    for condition in machine_names.CONDITION_TYPES:
        assert condition in status["conditions"]["description"]


@pytest.mark.parametrize("crd_name", ["nodepools.yaml", "machines.yaml"])
def test_every_field_has_bounds_for_the_cel_cost_estimate(crd_name):
    """The API server refuses CEL rules it cannot bound: every string, list and map under a rule has a maximum."""
    spec = _schema(_load(crd_name))["properties"]["spec"]
    for path, schema in _walk(spec):
        if schema.get("type") == "string" and "enum" not in schema:
            assert "maxLength" in schema, path
        if schema.get("type") == "array":
            assert "maxItems" in schema, path
        if schema.get("type") == "object" and "additionalProperties" in schema:
            assert "maxProperties" in schema, path


def _spec_properties(nodepool: dict) -> dict:
    return _schema(nodepool)["properties"]["spec"]["properties"]


def test_a_static_pool_needs_instance_types_and_a_provisioning_pool_does_not(nodepool):
    assert "!has(self.replicas) || has(self.template.spec.instanceTypes)" in _rules(_schema(nodepool)["properties"]["spec"])


def test_the_provisioning_fields_match_what_the_hooks_read(nodepool):
    from hooks import provisioning_names
    from hooks.machines import signals, spec

    props = _spec_properties(nodepool)
    assert (props["weight"]["minimum"], props["weight"]["maximum"]) == (0, spec.MAX_WEIGHT)
    requirements = props["requirements"]
    assert requirements["maxItems"] == spec.MAX_REQUIREMENTS
    item = requirements["items"]
    assert item["properties"]["operator"]["enum"] == list(provisioning_names.OPERATORS)
    assert item["properties"]["values"]["maxItems"] == spec.MAX_REQUIREMENT_VALUES
    assert item["properties"]["values"]["items"]["maxLength"] == spec.MAX_LABEL_VALUE
    assert item["properties"]["key"]["maxLength"] == spec.MAX_LABEL_KEY
    # The nodewarden.io/ keys a requirement may name: exactly the well-known ones.
    [rule] = _rules(item["properties"]["key"])
    named = set(re.findall(r"'(nodewarden\.io/[a-z-]+)'", rule))
    assert named == {k for k in provisioning_names.WELL_KNOWN if k.startswith(machine_names.OWN_KEY_PREFIX)}
    assert "'on-demand', 'spot'" in " ".join(_rules(item)) and spec.CAPACITY_TYPES == ("on-demand", "spot")
    limits = props["limits"]["properties"]
    assert set(limits) == {"cpu", "memory", "machines"} and limits["machines"]["maximum"] == spec.MAX_POOL_MACHINES
    disruption = props["disruption"]["properties"]
    assert disruption["consolidationPolicy"]["enum"] == list(spec.CONSOLIDATION_POLICIES)
    assert disruption["consolidateAfter"]["pattern"] == props["expireAfter"]["pattern"]
    reasons = disruption["budgets"]["items"]["properties"]["reasons"]
    assert set(reasons["items"]["enum"]) == set(signals.BUDGETED) and reasons["maxItems"] == len(signals.BUDGETED)


def test_the_nodepool_columns_tell_the_two_kinds_apart(nodepool):
    columns = {c["name"]: c for c in nodepool["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Replicas"]["jsonPath"] == ".spec.replicas"  # empty for a provisioning pool
    assert columns["Pending"]["jsonPath"] == ".status.provisioning.pendingPods"
    assert (columns["Weight"]["jsonPath"], columns["Weight"]["priority"]) == (".spec.weight", 1)


def _plain(schema):
    """The schema as JSON Schema: without the Kubernetes extensions (CEL is checked on the API server)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


TEMPLATE = {"instanceTypes": ["m7i.large", "m6i.large"], "subnetSelector": {"kubernetes.io/role/internal-elb": "*"},
            "imageId": "ami-0123456789abcdef0",
            "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]}


def test_a_full_nodepool_and_machine_fit_their_schemas(nodepool, machine):
    pool = {"apiVersion": machine_names.API_VERSION, "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {"replicas": 3, "registrationTTL": "20m", "drainTimeout": "1h30m",
                     "template": {"metadata": {"labels": {"team": "a"}}, "spec": TEMPLATE}},
            "status": {"observedGeneration": 1, "replicas": 3, "lastLeakCheck": "2026-01-01T00:00:00Z",
                       "machines": {"Launching": 1, "Registered": 0, "Initialized": 2, "Terminating": 0}}}
    jsonschema.validate(pool, _plain(_schema(nodepool)))
    one = {"apiVersion": machine_names.API_VERSION, "kind": "Machine",
           "metadata": {"name": "general-abc12", "labels": {machine_names.POOL_LABEL: "general"}},
           "spec": {**TEMPLATE, "labels": {"team": "a"}, "registrationTTL": "15m", "drainTimeout": "10m"},
           "status": {"instanceID": "i-0123", "capacity": {"cpu": "2", "memory": "8Gi"},
                      "termination": {"startedAt": "2026-01-01T00:00:00Z", "evictions": 4},
                      "conditions": [{"type": machine_names.INITIALIZED, "status": "True"}]}}
    jsonschema.validate(one, _plain(_schema(machine)))


PROVISIONING = {"weight": 10,
                "requirements": [{"key": "nodewarden.io/instance-family", "operator": "In", "values": ["m7i", "c7i"]},
                                 {"key": "nodewarden.io/instance-cpu", "operator": "Gt", "values": ["3"]},
                                 {"key": "example.com/dedicated", "operator": "Exists"}],
                "limits": {"cpu": 1000, "memory": "4000Gi", "machines": 50},
                "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never",
                               "budgets": [{"nodes": "1", "reasons": ["Empty", "Underutilized"]}]}}


def test_a_full_provisioning_pool_fits_its_schema(nodepool):
    template = {k: v for k, v in TEMPLATE.items() if k != "instanceTypes"}
    pool = {"apiVersion": machine_names.API_VERSION, "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {**PROVISIONING, "template": {"spec": template}},
            "status": {"provisioning": {"pendingPods": 12, "unschedulablePods": 1,
                                        "inFlight": {"machines": 3, "cpu": "12", "memory": "48Gi"},
                                        "resources": {"machines": 10, "cpu": "40", "memory": "160Gi"},
                                        "limits": {"machines": 50, "cpu": "1000", "memory": "4000Gi"},
                                        "lastRound": "2026-11-27T13:00:00Z"},
                       "consolidation": [{"machine": "general-ab12c", "uid": "6f1c", "reason": "Empty",
                                          "since": "2026-11-27T12:59:00Z"}]}}
    jsonschema.validate(pool, _plain(_schema(nodepool)))


@pytest.mark.parametrize("change", [
    {"weight": 101}, {"weight": -1},
    {"requirements": [{"key": "kubernetes.io/arch", "operator": "Within", "values": ["amd64"]}]},
    {"requirements": [{"key": "kubernetes.io/arch", "values": ["amd64"]}]},
    {"requirements": [{"key": "bad key", "operator": "Exists"}]},
    {"requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["not a value"]}]},
    {"requirements": [{"key": "example.com/k", "operator": "Exists"}] * 31},
    {"limits": {"cpu": "lots"}}, {"limits": {"memory": "-4Gi"}}, {"limits": {"machines": 10001}},
    {"disruption": {"consolidationPolicy": "WhenIdle"}}, {"disruption": {"consolidateAfter": "soon"}},
    {"disruption": {"budgets": [{"nodes": "1", "reasons": ["Whim"]}]}},
])
def test_the_schema_refuses_a_malformed_provisioning_field(nodepool, change):
    spec = {"template": {"spec": TEMPLATE}, **change}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"spec": spec}, _plain(_schema(nodepool)))


@pytest.mark.parametrize("change", [
    {"instanceTypes": []},
    {"taints": [{"key": "a", "effect": "NoWhere"}]},
    {"userData": "x" * 16385},
    {"registrationTTL": "15 minutes"},
])
def test_the_schema_refuses_what_the_contract_rules_out(machine, change):
    spec = {**TEMPLATE, **change}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"spec": spec}, _plain(_schema(machine)))


@pytest.mark.parametrize("crd_name", ["nodepools.yaml", "machines.yaml"])
def test_names_fit_a_label_value(crd_name):
    """A NodePool's name is its Machines' nodewarden.io/nodepool label, a Machine's its Node's nodewarden.io/machine."""
    assert "size(self.metadata.name) <= 63" in _rules(_schema(_load(crd_name)))


def _node_keys(crd_name: str) -> dict:
    """The maps and taint lists whose keys end up on Nodes, by path."""
    schema = _schema(_load(crd_name))
    return {path: sub for path, sub in _walk(schema)
            if path.endswith((".labels", ".annotations", ".taints[].key", ".startupTaints[].key"))
            and not path.startswith(".status")}


@pytest.mark.parametrize("crd_name", ["nodepools.yaml", "machines.yaml"])
def test_keys_in_nodewardens_domain_are_refused(crd_name):
    """nodewarden.io/machine on a Node is how its Machine finds it: no spec may set a key of ours."""
    found = _node_keys(crd_name)
    assert len(found) == 4, sorted(found)
    for path, sub in found.items():
        [rule] = _rules(sub)
        assert "startsWith('nodewarden.io/')" in rule and machine_names.OWN_KEY_PREFIX == "nodewarden.io/", path


def test_the_demo_pool_of_make_up_is_one_the_api_server_accepts(nodepool):
    """`make up` creates devcluster/demo.py's NodePool: it must fit the schema and keep off nodewarden's own
    label domain, which the CRD's CEL rule refuses (a 422, and `make up` stops)."""
    from devcluster import demo

    pool = demo.pool_manifest()
    jsonschema.validate(pool, _plain(_schema(nodepool)))
    metadata = _schema(nodepool)["properties"]["spec"]["properties"]["template"]["properties"]["metadata"]
    for field in ("labels", "annotations"):
        assert "self.all(k, !k.startsWith('nodewarden.io/'))" in _rules(metadata["properties"][field])
        keys = pool["spec"]["template"].get("metadata", {}).get(field, {})
        assert not [k for k in keys if k.startswith("nodewarden.io/")], keys
