"""The kustomize output: what Metacontroller and the API server will be given."""
from __future__ import annotations

import pathlib
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).parents[2]
KUSTOMIZE = ROOT / ".bin" / "kustomize"
pytestmark = pytest.mark.skipif(not KUSTOMIZE.exists(), reason="kustomize not built yet (make controlplane-bins)")


def build(overlay: str) -> list[dict]:
    out = subprocess.run([str(KUSTOMIZE), "build", str(ROOT / "kustomize" / overlay)], capture_output=True,
                         text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def aws_objects():
    return build("overlays/aws")


def test_every_controller_uses_strict_v2_hooks_on_our_service(aws_objects):
    controllers = [o for o in aws_objects if o["kind"] in ("DecoratorController", "CompositeController")]
    assert {c["metadata"]["name"] for c in controllers} >= {"node", "node-detacher-pods"}
    for c in controllers:
        for name, hook in c["spec"]["hooks"].items():
            assert hook["version"] == "v2", (c["metadata"]["name"], name)
            assert hook["webhook"]["url"].startswith("https://nodewarden.nodewarden-system.svc/")


def test_each_controller_file_is_named_after_the_controller_it_holds():
    for path in sorted((ROOT / "metacontroller").glob("*.yaml")):
        held = [d["metadata"]["name"] for d in yaml.safe_load_all(path.read_text())
                if isinstance(d, dict) and d.get("kind") in ("DecoratorController", "CompositeController")]
        assert held in ([], [path.stem]), (path.name, held)


def test_node_decorators_never_ignore_status_changes(aws_objects):
    for c in aws_objects:
        if c["kind"] == "DecoratorController" and any(r["resource"] == "nodes" for r in c["spec"]["resources"]):
            assert not c["spec"].get("ignoreStatusChanges"), c["metadata"]["name"]


def test_hook_server_runs_hardened_with_two_replicas(aws_objects):
    deploy = next(o for o in aws_objects if o["kind"] == "Deployment")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}  # plain HTTP there
    assert any(o["kind"] == "PodDisruptionBudget" for o in aws_objects)


# Written whole by Metacontroller from a hook's answer: nothing reports back in a status.
RECORD_CRDS = {"unhealthynodes.nodewarden.io"}


def test_crds_have_status_subresource_and_printer_columns(aws_objects):
    crds = [o for o in aws_objects if o["kind"] == "CustomResourceDefinition" and o["spec"]["group"] == "nodewarden.io"]
    assert RECORD_CRDS <= {c["metadata"]["name"] for c in crds}
    for crd in crds:
        version = crd["spec"]["versions"][0]
        if crd["metadata"]["name"] in RECORD_CRDS:
            assert "status" not in version["schema"]["openAPIV3Schema"]["properties"], crd["metadata"]["name"]
        else:
            assert version["subresources"].get("status") == {}, crd["metadata"]["name"]
        assert version.get("additionalPrinterColumns"), crd["metadata"]["name"]


def test_rbac_is_least_privilege(aws_objects):
    for role in (o for o in aws_objects if o["kind"] == "ClusterRole"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], role["metadata"]["name"]


def test_only_metacontroller_reaches_the_hooks_and_only_prometheus_the_metrics(aws_objects):
    policy = next(o for o in aws_objects if o["kind"] == "NetworkPolicy")
    deploy = next(o for o in aws_objects if o["kind"] == "Deployment")
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    by_port = {rule["ports"][0]["port"]: rule["from"] for rule in policy["spec"]["ingress"]}
    assert set(by_port) == {"https", "metrics"}
    assert by_port["https"][0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "metacontroller"}
    assert by_port["metrics"][0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NODEWARDEN_METRICS_PORT"] == str(ports["metrics"]) and ports["metrics"] != ports["https"]
    assert env["NODEWARDEN_BIND"].endswith(f":{ports['https']}")


def _granted(objects: list[dict], account: tuple[str, str]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) the ClusterRoles bound to the ServiceAccount ``account`` allow."""
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    granted = set()
    for binding in (o for o in objects if o["kind"] == "ClusterRoleBinding"):
        if not any(s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == account
                   for s in binding.get("subjects") or []):
            continue
        for rule in roles.get(binding["roleRef"]["name"], {}).get("rules", []):
            granted |= {(g, r, v) for g in rule.get("apiGroups", []) for r in rule.get("resources", [])
                        for v in rule.get("verbs", [])}
    return granted


def test_the_hook_server_creates_fencing_requests_in_its_own_namespace_only(aws_objects):
    """node-fencing-policy makes an admitted node's FencingRequest itself: granted by a Role in the namespace
    where requests are honoured, never cluster-wide."""
    deploy = next(o for o in aws_objects if o["kind"] == "Deployment")
    namespace = deploy["metadata"]["namespace"]
    account = (namespace, deploy["spec"]["template"]["spec"]["serviceAccountName"])
    assert ("nodewarden.io", "fencingrequests", "create") not in _granted(aws_objects, account)
    roles = {o["metadata"]["name"]: o for o in aws_objects if o["kind"] == "Role"}
    granted = set()
    for binding in (o for o in aws_objects if o["kind"] == "RoleBinding"):
        if any((s.get("namespace"), s.get("name")) == account for s in binding.get("subjects") or []):
            role = roles[binding["roleRef"]["name"]]
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
            granted |= {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                        for v in rule["verbs"]}
    assert ("nodewarden.io", "fencingrequests", "create") in granted


@pytest.mark.parametrize("kind", ["AWSCluster", "AWSManagedControlPlane"])
def test_the_hook_server_may_re_read_cluster_gc_parents(aws_objects, kind):
    """cluster-gc deletes nothing without a fresh read of its parent; a Forbidden read would hold every cluster."""
    from hooks.kube.fresh import KINDS

    deploy = next(o for o in aws_objects if o["kind"] == "Deployment")
    account = (deploy["metadata"]["namespace"], deploy["spec"]["template"]["spec"]["serviceAccountName"])
    group, plural, _ = KINDS[kind]
    assert (group, plural, "get") in _granted(aws_objects, account)


def test_the_hook_server_may_list_the_nodes_a_policy_counts(aws_objects):
    """node-fencing-policy counts from a list of the selected Nodes; a Forbidden list holds every policy."""
    deploy = next(o for o in aws_objects if o["kind"] == "Deployment")
    account = (deploy["metadata"]["namespace"], deploy["spec"]["template"]["spec"]["serviceAccountName"])
    assert ("", "nodes", "list") in _granted(aws_objects, account)


def _crd(objects: list[dict], name: str) -> dict:
    return next(o for o in objects if o["kind"] == "CustomResourceDefinition" and o["metadata"]["name"] == name)


def _controller(objects: list[dict], name: str) -> dict:
    return next(o for o in objects if o["kind"] in ("DecoratorController", "CompositeController")
                and o["metadata"]["name"] == name)


def test_every_hook_url_is_a_route_the_server_serves(aws_objects):
    """Metacontroller calls exactly these URLs; a 404 there stalls the controller's objects.

    Fails for nodepool and machine until their modules are listed in hooks/controllers/CONTROLLERS.
    """
    from urllib.parse import urlsplit

    from hooks.contract import COMPOSITE, DECORATOR
    from hooks.dispatch import UnknownHook, resolve

    kinds = {"DecoratorController": DECORATOR, "CompositeController": COMPOSITE}
    unserved = []
    for c in (o for o in aws_objects if o["kind"] in kinds):
        for hook_name, hook in c["spec"]["hooks"].items():
            controller, hook_path = urlsplit(hook["webhook"]["url"]).path.strip("/").split("/")
            assert (controller, hook_path) == (c["metadata"]["name"], hook_name), hook["webhook"]["url"]
            try:
                kind, _ = resolve(controller, hook_name)
            except UnknownHook:
                unserved.append(f"{controller}/{hook_name}")
                continue
            assert kind == kinds[c["kind"]], (controller, kind)
    assert not unserved, f"no route for {unserved}"


@pytest.mark.parametrize("name, kind, short_names", [
    ("nodepools.nodewarden.io", "NodePool", ["np"]),
    ("machines.nodewarden.io", "Machine", None),
])
def test_machine_crds_are_cluster_scoped_nodewarden_kinds(aws_objects, name, kind, short_names):
    crd = _crd(aws_objects, name)
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["kind"] == kind
    assert crd["spec"]["names"].get("shortNames") == short_names
    assert crd["spec"]["names"]["categories"] == ["nodewarden"]
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)


def test_nodepool_scales_through_the_scale_subresource(aws_objects):
    [version] = _crd(aws_objects, "nodepools.nodewarden.io")["spec"]["versions"]
    assert version["subresources"]["scale"] == {"specReplicasPath": ".spec.replicas",
                                                "statusReplicasPath": ".status.replicas"}


@pytest.mark.parametrize("name, columns", [
    ("nodepools.nodewarden.io", [("Replicas", ".spec.replicas", 0), ("Ready", ".status.machines.Initialized", 0),
                                 ("Disrupting", ".status.disruption.disrupting", 0),
                                 ("Pending", ".status.provisioning.pendingPods", 0),
                                 ("Age", ".metadata.creationTimestamp", 0), ("Weight", ".spec.weight", 1)]),
    ("machines.nodewarden.io", [("Type", ".status.instanceType", 0), ("Zone", ".status.zone", 0),
                                ("Node", ".status.nodeName", 0),
                                ("Ready", '.status.conditions[?(@.type=="Initialized")].status', 0),
                                ("Disruption", '.status.conditions[?(@.type=="Disrupted")].reason', 0),
                                ("Age", ".metadata.creationTimestamp", 0),
                                ("Instance", ".status.instanceID", 1),
                                ("Pool", r".metadata.labels.nodewarden\.io/nodepool", 1)]),
])
def test_machine_crds_printer_columns(aws_objects, name, columns):
    [version] = _crd(aws_objects, name)["spec"]["versions"]
    found = [(c["name"], c["jsonPath"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]]
    assert found == columns


def test_nodepool_controller_owns_machines_and_never_updates_them(aws_objects):
    c = _controller(aws_objects, "nodepool")
    assert c["kind"] == "CompositeController"
    assert c["spec"]["parentResource"] == {"apiVersion": "nodewarden.io/v1alpha1", "resource": "nodepools"}
    [child] = c["spec"]["childResources"]
    # No updateStrategy: Metacontroller's default, OnDelete, leaves existing Machines alone.
    assert child == {"apiVersion": "nodewarden.io/v1alpha1", "resource": "machines"}
    assert c["spec"]["generateSelector"] is True and c["spec"]["resyncPeriodSeconds"] == 60
    assert set(c["spec"]["hooks"]) == {"customize", "sync", "finalize"}
    assert "updateStrategy" not in c["spec"]  # no rolling update: sync would see hypothetical parents


def test_machine_controller_has_no_children_and_relates_its_node(aws_objects):
    c = _controller(aws_objects, "machine")
    assert c["kind"] == "CompositeController"
    assert c["spec"]["parentResource"] == {"apiVersion": "nodewarden.io/v1alpha1", "resource": "machines"}
    assert not c["spec"].get("childResources")
    assert c["spec"]["generateSelector"] is True and c["spec"]["resyncPeriodSeconds"] == 30
    assert set(c["spec"]["hooks"]) == {"customize", "sync", "finalize"}
    assert "updateStrategy" not in c["spec"]
    for hook in c["spec"]["hooks"].values():
        assert hook["webhook"]["timeout"] == "10s"


@pytest.mark.parametrize("group, resource, verb", [
    ("nodewarden.io", "nodepools", "get"), ("nodewarden.io", "machines", "get"),
    ("nodewarden.io", "machines", "delete"),
    ("", "nodes", "patch"), ("", "nodes", "delete"), ("", "pods", "list"), ("", "pods/eviction", "create"),
    ("storage.k8s.io", "volumeattachments", "list"), ("", "events", "create"),
    # A provisioning pool's reads (hooks/kube/provisioning_reads.py).
    ("nodewarden.io", "nodepools", "list"), ("nodewarden.io", "machines", "list"), ("", "nodes", "list"),
    ("apps", "daemonsets", "list"), ("policy", "poddisruptionbudgets", "list"),
    ("", "persistentvolumeclaims", "list"), ("", "persistentvolumes", "list"),
    ("storage.k8s.io", "storageclasses", "list"), ("storage.k8s.io", "csinodes", "list"),
])
def test_the_hook_server_may_do_what_the_machine_controllers_need(aws_objects, group, resource, verb):
    deploy = next(o for o in aws_objects if o["kind"] == "Deployment")
    account = (deploy["metadata"]["namespace"], deploy["spec"]["template"]["spec"]["serviceAccountName"])
    assert (group, resource, verb) in _granted(aws_objects, account)


def test_the_hook_server_never_writes_machines_or_nodepools(aws_objects):
    """Metacontroller creates Machines and writes both kinds' status; the hooks only delete an expired Machine
    and patch a Machine's interruption annotation (hooks/kube/interruptions.py)."""
    deploy = next(o for o in aws_objects if o["kind"] == "Deployment")
    account = (deploy["metadata"]["namespace"], deploy["spec"]["template"]["spec"]["serviceAccountName"])
    writes = {(r, v) for g, r, v in _granted(aws_objects, account) if g == "nodewarden.io"
              and r.split("/")[0] in ("nodepools", "machines") and v not in ("get", "list", "watch")}
    assert writes == {("machines", "delete"), ("machines", "patch")}


@pytest.mark.parametrize("group, resource, verb", [
    ("karpenter.sh", "nodeclaims", "get"), ("karpenter.sh", "nodeclaims", "list"),
    ("karpenter.sh", "nodeclaims", "delete"),
    ("cluster.x-k8s.io", "machines", "get"), ("cluster.x-k8s.io", "machines", "list"),
    ("cluster.x-k8s.io", "machines/status", "patch"),
])
def test_the_hook_server_may_ask_a_fenced_nodes_owner_to_replace_it(aws_objects, group, resource, verb):
    """hooks/kube/owners.py: a Forbidden read leaves the owner unproven, a Forbidden write the node unreplaced."""
    deploy = next(o for o in aws_objects if o["kind"] == "Deployment")
    account = (deploy["metadata"]["namespace"], deploy["spec"]["template"]["spec"]["serviceAccountName"])
    assert (group, resource, verb) in _granted(aws_objects, account)


def test_the_hook_server_writes_an_owner_only_by_a_nodeclaims_delete_and_a_machines_status(aws_objects):
    """Karpenter and Cluster API own their objects: nodewarden deletes a NodeClaim and marks a Machine's
    status, nothing else of theirs."""
    deploy = next(o for o in aws_objects if o["kind"] == "Deployment")
    account = (deploy["metadata"]["namespace"], deploy["spec"]["template"]["spec"]["serviceAccountName"])
    writes = {(g, r, v) for g, r, v in _granted(aws_objects, account) if g in ("karpenter.sh", "cluster.x-k8s.io")
              and v not in ("get", "list", "watch")}
    assert writes == {("karpenter.sh", "nodeclaims", "delete"), ("cluster.x-k8s.io", "machines/status", "patch")}


# -- only Metacontroller may call the hooks ------------------------------------------------------

# The fields of Metacontroller v4.16+'s controller CRDs that carry webhook credentials, as its
# types.go declares them (EndpointConfig, Authorization, CABundle, ClientTLS, SecretKeyRef,
# ResourceKeyRef, SecretRef). The v4 CRDs themselves are checked below when the module is cached.
V4_ENDPOINT_CONFIG = {
    "host": str,
    "authorization": {"type": str, "secretRef": {"name": str, "namespace": str, "key": str}},
    "basicAuth": {"secretRef": {"name": str, "namespace": str}, "usernameKey": str, "passwordKey": str},
    "caBundle": {"inline": str, "secretRef": {"name": str, "namespace": str, "key": str},
                 "configMapRef": {"name": str, "namespace": str, "key": str}},
    "clientTLS": {"secretRef": {"name": str, "namespace": str}, "certKey": str, "privateKeyKey": str},
}


def _conforms(value, shape, path="") -> list[str]:
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        return [p for k, v in value.items()
                for p in (_conforms(v, shape[k], f"{path}.{k}") if k in shape else [f"{path}.{k}: unknown field"])]
    return [] if isinstance(value, shape) else [f"{path}: not a {shape.__name__}"]


def _hook_pod(objects):
    deploy = next(o for o in objects if o["kind"] == "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    return deploy, container, env, mounts, secrets


def _secret_of_file(path: str, mounts: dict, secrets: dict) -> tuple[str, str]:
    """(Secret name, key) a file path of the container reads."""
    directory, _, key = path.rpartition("/")
    return secrets[mounts[directory]], key


def test_every_controller_sends_the_token_the_server_reads_and_verifies_its_certificate(aws_objects):
    from urllib.parse import urlsplit

    deploy, container, env, mounts, secrets = _hook_pod(aws_objects)
    namespace = deploy["metadata"]["namespace"]
    service = next(o for o in aws_objects if o["kind"] == "Service")
    assert env["NODEWARDEN_REQUIRE_AUTH"] == "true"
    token_files = env["NODEWARDEN_AUTH_TOKEN_FILES"].split(",")
    token = _secret_of_file(token_files[0], mounts, secrets)
    assert {_secret_of_file(f, mounts, secrets)[0] for f in token_files} == {token[0]}  # token and previous
    tls_secret, _ = _secret_of_file(env["NODEWARDEN_TLS_CERT_FILE"], mounts, secrets)
    assert _secret_of_file(env["NODEWARDEN_TLS_KEY_FILE"], mounts, secrets) == (tls_secret, "tls.key")
    controllers = [o for o in aws_objects if o["kind"] in ("DecoratorController", "CompositeController")]
    assert len(controllers) == 8
    for c in controllers:
        [entry] = c["spec"]["endpointConfigs"]
        assert _conforms(entry, V4_ENDPOINT_CONFIG) == [], c["metadata"]["name"]
        for hook in c["spec"]["hooks"].values():
            url = urlsplit(hook["webhook"]["url"])
            assert url.scheme == "https" and url.hostname == entry["host"]
            assert url.hostname == f"{service['metadata']['name']}.{namespace}.svc" and url.port is None
        auth = entry["authorization"]
        assert auth["type"] == "Bearer"
        assert (auth["secretRef"]["namespace"], auth["secretRef"]["name"], auth["secretRef"]["key"]) == \
            (namespace, *token)
        ca = entry["caBundle"]["secretRef"]
        assert (ca["namespace"], ca["name"], ca["key"]) == (namespace, tls_secret, "ca.crt")
    assert next(p for p in service["spec"]["ports"] if p["targetPort"] == "https")["port"] == 443


def test_the_generated_credentials_are_what_the_manifests_name(aws_objects, tmp_path):
    """`nodewarden credentials` makes the two Secrets by the names and keys the base reads."""
    import datetime as dt

    from cryptography import x509

    from hooks import credentials

    deploy, container, env, mounts, secrets = _hook_pod(aws_objects)
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "nodewarden"), "credentials"], capture_output=True,
                         text=True, check=True).stdout
    made = {d["metadata"]["name"]: d for d in yaml.safe_load_all(out)}
    token_secret, token_key = _secret_of_file(env["NODEWARDEN_AUTH_TOKEN_FILES"].split(",")[0], mounts, secrets)
    tls_secret, _ = _secret_of_file(env["NODEWARDEN_TLS_CERT_FILE"], mounts, secrets)
    assert set(made) == {token_secret, tls_secret} == {credentials.TOKEN_SECRET, credentials.TLS_SECRET}
    assert all(d["metadata"]["namespace"] == deploy["metadata"]["namespace"] for d in made.values())
    assert len(made[token_secret]["stringData"][token_key]) >= 40
    tls = made[tls_secret]["stringData"]
    assert set(tls) == {"tls.crt", "tls.key", "ca.crt"} and made[tls_secret]["type"] == "kubernetes.io/tls"
    cert = x509.load_pem_x509_certificate(tls["tls.crt"].encode())
    ca = x509.load_pem_x509_certificate(tls["ca.crt"].encode())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "nodewarden.nodewarden-system.svc" in names
    assert cert.not_valid_after_utc > dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=300)


def test_controllers_use_only_fields_of_metacontrollers_v4_crds(aws_objects):
    """Validated against v4's own CRDs (manifests/production) when its module is in the Go module cache."""
    import shutil

    from devcluster import manifests
    from tests.support.builds import go_env

    if shutil.which("go") is None:
        pytest.skip("Go is not on PATH")
    cache = pathlib.Path(go_env("GOMODCACHE")) / "github.com" / "metacontroller"
    sources = sorted(cache.glob("metacontroller@v0.0.0-2026*")) if cache.is_dir() else []
    if not sources:
        pytest.skip("Metacontroller v4 is not in the Go module cache (the module proxy refused it when it was built)")
    crd_files = sorted((sources[-1] / "manifests" / "production").glob("*crds*.yaml"))
    crds = [d for f in crd_files for d in yaml.safe_load_all(f.read_text()) if d]
    controllers = [o for o in aws_objects if o["kind"] in ("DecoratorController", "CompositeController")]
    assert manifests.drop_unknown_fields(controllers, crds) == []


def test_the_cert_manager_component_makes_the_secret_the_server_and_metacontroller_read(tmp_path):
    import os

    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({  # kustomize takes relative paths only
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "kustomize" / "overlays" / "aws", overlay)],
        "components": [os.path.relpath(ROOT / "kustomize" / "components" / "cert-manager", overlay)]}))
    objects = [d for d in yaml.safe_load_all(subprocess.run(
        [str(KUSTOMIZE), "build", "--load-restrictor=LoadRestrictionsNone", str(overlay)],
        capture_output=True, text=True, check=True).stdout) if d]
    deploy, container, env, mounts, secrets = _hook_pod(objects)
    tls_secret, _ = _secret_of_file(env["NODEWARDEN_TLS_CERT_FILE"], mounts, secrets)
    certs = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Certificate"}
    issuers = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Issuer"}
    serving = next(c for c in certs.values() if c["spec"]["secretName"] == tls_secret)
    ca_issuer = issuers[serving["spec"]["issuerRef"]["name"]]
    ca_cert = next(c for c in certs.values() if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"])
    assert ca_cert["spec"]["isCA"] and "selfSigned" in issuers[ca_cert["spec"]["issuerRef"]["name"]]["spec"]
    host = next(o for o in objects if o["kind"] == "DecoratorController")["spec"]["endpointConfigs"][0]["host"]
    assert host in serving["spec"]["dnsNames"]
    assert all(o["metadata"]["namespace"] == deploy["metadata"]["namespace"] for o in [*certs.values(), *issuers.values()])
