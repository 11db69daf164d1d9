"""Configuration from the environment: the one table users set.

Every setting is documented in docs/configuration.md; names are part of the
public interface, so keep them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from hooks import aws_rate_buckets


class ConfigError(ValueError):
    pass


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (true/false)")


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    return value


def _share(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name, default)
    if value > 1:
        raise ConfigError(f"{name}={env.get(name)!r}: a share is from 0 to 1")
    return value


def _shares(env: Mapping[str, str], name: str) -> tuple[tuple[str, float], ...]:
    try:
        return tuple(sorted(aws_rate_buckets.parse_shares(env.get(name) or "").items()))
    except (ValueError, AttributeError) as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = env.get(name) or ""
    return tuple(item.strip() for item in raw.replace("\n", ",").split(",") if item.strip())


@dataclass(frozen=True)
class Settings:
    cluster_name: str = ""
    namespace: str = "nodewarden-system"
    aws_region: str = ""
    max_body_bytes: int = 16 * 1024 * 1024
    log_level: str = "INFO"
    metrics_port: int = 0  # 0: /metrics on the hook port; else only there, and hooks never there
    # Who may call the hooks (hooks/auth.py) and TLS on the hook port (hooks/serving.py).
    auth_token_files: tuple[str, ...] = ()
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    tls_client_names: tuple[str, ...] = ()
    # How long the server waits on a client (hooks/serving.py): for a connection's TLS handshake and request
    # head together, and for each read of a body or write of an answer.
    client_timeout_seconds: float = 5
    # This deployment's share of each of the account's AWS request buckets (hooks/aws/rate_limits.py), split
    # over its processes; per bucket name, shares that override it; what one hook call's AWS calls may wait;
    # the time within which a hook call's retries of AWS calls must be able to end.
    aws_rate_share: float = 0.5
    aws_rate_processes: int = 4
    aws_rate_shares: tuple[tuple[str, float], ...] = ()
    aws_rate_wait_seconds: float = 2.0
    hook_aws_retry_seconds: float = 9.0
    # How old the process's view of the cluster's instances may be; how long a fresh read waits for others.
    instance_view_seconds: float = 10.0
    instance_read_window_seconds: float = 0.02
    require_auth: bool = False
    # node-detacher
    detach_taint_keys: tuple[str, ...] = ()
    detach_control_plane: bool = False
    static_target_groups: tuple[str, ...] = ()
    static_classic_elbs: tuple[str, ...] = ()
    include_lb_controller: bool = True
    managed_daemonsets: tuple[str, ...] = ()
    detacher_name: str = "node-detacher"
    node_resync_seconds: float = 300
    discovery_cache_seconds: float = 30
    drain_poll_seconds: float = 5
    deregister_batch_window_seconds: float = 0.5
    finalize_drain_timeout_seconds: float = 330
    drain_timeout_seconds: float = 3900  # past AWS's longest deregistration delay (3600 s)
    reattach_timeout_seconds: float = 900
    unschedulable_taint_wait_seconds: float = 3
    daemonset_replacement_timeout_seconds: float = 600
    # cluster-gc
    external_resource_gc: bool = True
    gc_use_tagging_api: bool = True
    gc_include_lb_controller: bool = False
    gc_call_budget_seconds: float = 1.0
    gc_max_deletes_per_call: int = 50
    gc_progress_resync_seconds: float = 1
    gc_controller_name: str = "cluster-gc"  # the DecoratorController's name: its finalizer is checked
    gc_wait_limit_seconds: float = 3600  # how long, in all, a deletion waits for its resources to be free
    # fencing: node-fencing, node-fencing-policy, fencing-request
    fencing_poll_seconds: float = 2
    fencing_recovery_poll_seconds: float = 5
    fencing_recovery_timeout_seconds: float = 600
    fencing_resync_seconds: float = 30
    fencing_release_timeout_seconds: float = 600
    fencing_queue_timeout_seconds: float = 1800
    fencing_count_interval_seconds: float = 30
    fencing_count_max_age_seconds: float = 90
    fencing_policy_cache_seconds: float = 2
    replacement_timeout_seconds: float = 1800
    # machine, nodepool
    machine_poll_seconds: float = 2
    machine_launch_visibility_seconds: float = 60
    machine_launch_budget_seconds: float = 1.0  # past it, a call asks for no further launch candidate
    machine_detach_wait_seconds: float = 330
    machine_volume_detach_timeout_seconds: float = 360
    machine_terminate_retry_seconds: float = 60
    leaked_instance_grace_seconds: float = 600
    leaked_instance_check_seconds: float = 60
    # provisioning NodePools
    provisioning_poll_seconds: float = 0.5
    consolidation_check_seconds: float = 5
    batch_idle_seconds: float = 1
    batch_max_seconds: float = 10
    # shared
    error_backoff_seconds: float = 5
    error_backoff_max_seconds: float = 300
    extra: Mapping[str, str] = field(default_factory=dict)


def _check_auth(settings: Settings) -> Settings:
    if bool(settings.tls_cert_file) != bool(settings.tls_key_file):
        raise ConfigError("NODEWARDEN_TLS_CERT_FILE and NODEWARDEN_TLS_KEY_FILE are set together or not at all")
    if settings.tls_client_ca_file and not settings.tls_cert_file:
        raise ConfigError("NODEWARDEN_TLS_CLIENT_CA_FILE needs TLS (NODEWARDEN_TLS_CERT_FILE and _KEY_FILE): "
                          "a client certificate is only presented in a TLS handshake")
    if settings.tls_client_names and not settings.tls_client_ca_file:
        raise ConfigError("NODEWARDEN_TLS_CLIENT_NAMES needs NODEWARDEN_TLS_CLIENT_CA_FILE")
    if settings.require_auth and not (settings.auth_token_files or settings.tls_client_ca_file):
        raise ConfigError("NODEWARDEN_REQUIRE_AUTH is true, but neither NODEWARDEN_AUTH_TOKEN_FILES nor "
                          "NODEWARDEN_TLS_CLIENT_CA_FILE is set: anyone reaching the hook port could call the hooks")
    return settings


def _check_batch(settings: Settings) -> Settings:
    if settings.batch_max_seconds < settings.batch_idle_seconds:
        raise ConfigError("NODEWARDEN_BATCH_MAX_SECONDS must be at least NODEWARDEN_BATCH_IDLE_SECONDS: "
                          "a batch closes at the latest after the longest wait")
    return settings


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read settings; raise ConfigError with the variable's name when one is wrong."""
    env = os.environ if env is None else env
    return _check_batch(_check_auth(Settings(
        cluster_name=env.get("NODEWARDEN_CLUSTER_NAME", "").strip(),
        namespace=env.get("NODEWARDEN_NAMESPACE", "").strip() or "nodewarden-system",
        aws_region=(env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "").strip(),
        max_body_bytes=int(_number(env, "NODEWARDEN_MAX_BODY_BYTES", 16 * 1024 * 1024, minimum=1024)),
        log_level=(env.get("NODEWARDEN_LOG_LEVEL") or "INFO").upper(),
        metrics_port=int(_number(env, "NODEWARDEN_METRICS_PORT", 0)),
        auth_token_files=_list(env, "NODEWARDEN_AUTH_TOKEN_FILES"),
        tls_cert_file=env.get("NODEWARDEN_TLS_CERT_FILE", "").strip(),
        tls_key_file=env.get("NODEWARDEN_TLS_KEY_FILE", "").strip(),
        tls_client_ca_file=env.get("NODEWARDEN_TLS_CLIENT_CA_FILE", "").strip(),
        tls_client_names=_list(env, "NODEWARDEN_TLS_CLIENT_NAMES"),
        client_timeout_seconds=_number(env, "NODEWARDEN_CLIENT_TIMEOUT_SECONDS", 5, minimum=0.1),
        aws_rate_share=_share(env, "NODEWARDEN_AWS_RATE_SHARE", 0.5),
        aws_rate_processes=int(_number(env, "NODEWARDEN_AWS_RATE_PROCESSES", 4, minimum=1)),
        aws_rate_shares=_shares(env, "NODEWARDEN_AWS_RATE_SHARES"),
        aws_rate_wait_seconds=_number(env, "NODEWARDEN_AWS_RATE_WAIT_SECONDS", 2.0),
        hook_aws_retry_seconds=_number(env, "NODEWARDEN_HOOK_AWS_RETRY_SECONDS", 9.0),
        instance_view_seconds=_number(env, "NODEWARDEN_INSTANCE_VIEW_SECONDS", 10.0),
        instance_read_window_seconds=min(1.0, _number(env, "NODEWARDEN_INSTANCE_READ_WINDOW_SECONDS", 0.02)),
        require_auth=_bool(env, "NODEWARDEN_REQUIRE_AUTH", False),
        detach_taint_keys=_list(env, "NODEWARDEN_DETACH_TAINT_KEYS"),
        detach_control_plane=_bool(env, "NODEWARDEN_DETACH_CONTROL_PLANE", False),
        static_target_groups=_list(env, "NODEWARDEN_STATIC_TARGET_GROUPS"),
        static_classic_elbs=_list(env, "NODEWARDEN_STATIC_CLASSIC_ELBS"),
        include_lb_controller=_bool(env, "NODEWARDEN_INCLUDE_LB_CONTROLLER", True),
        managed_daemonsets=_list(env, "NODEWARDEN_MANAGED_DAEMONSETS"),
        detacher_name=env.get("NODEWARDEN_DETACHER_NAME", "").strip() or "node-detacher",
        node_resync_seconds=_number(env, "NODEWARDEN_NODE_RESYNC_SECONDS", 300, minimum=10),
        discovery_cache_seconds=_number(env, "NODEWARDEN_DISCOVERY_CACHE_SECONDS", 30),
        drain_poll_seconds=_number(env, "NODEWARDEN_DRAIN_POLL_SECONDS", 5, minimum=0.1),
        deregister_batch_window_seconds=min(1.0, _number(env, "NODEWARDEN_DEREGISTER_BATCH_WINDOW_SECONDS",
                                                         0.5)),
        finalize_drain_timeout_seconds=_number(env, "NODEWARDEN_FINALIZE_DRAIN_TIMEOUT_SECONDS", 330),
        drain_timeout_seconds=_number(env, "NODEWARDEN_DRAIN_TIMEOUT_SECONDS", 3900),
        reattach_timeout_seconds=_number(env, "NODEWARDEN_REATTACH_TIMEOUT_SECONDS", 900),
        unschedulable_taint_wait_seconds=min(60.0, _number(env, "NODEWARDEN_UNSCHEDULABLE_TAINT_WAIT_SECONDS", 3)),
        daemonset_replacement_timeout_seconds=_number(env, "NODEWARDEN_DAEMONSET_REPLACEMENT_TIMEOUT_SECONDS", 600),
        external_resource_gc=_bool(env, "NODEWARDEN_EXTERNAL_RESOURCE_GC", True),
        gc_use_tagging_api=_bool(env, "NODEWARDEN_GC_TAGGING_API", True),
        gc_include_lb_controller=_bool(env, "NODEWARDEN_GC_INCLUDE_LB_CONTROLLER", False),
        gc_call_budget_seconds=_number(env, "NODEWARDEN_GC_CALL_BUDGET_SECONDS", 1.0, minimum=0.1),
        gc_max_deletes_per_call=int(_number(env, "NODEWARDEN_GC_MAX_DELETES_PER_CALL", 50, minimum=1)),
        gc_progress_resync_seconds=_number(env, "NODEWARDEN_GC_PROGRESS_RESYNC_SECONDS", 1, minimum=0.1),
        gc_controller_name=env.get("NODEWARDEN_GC_CONTROLLER_NAME", "").strip() or "cluster-gc",
        gc_wait_limit_seconds=_number(env, "NODEWARDEN_GC_WAIT_LIMIT_SECONDS", 3600, minimum=60),
        fencing_poll_seconds=_number(env, "NODEWARDEN_FENCING_POLL_SECONDS", 2, minimum=0.1),
        fencing_recovery_poll_seconds=_number(env, "NODEWARDEN_FENCING_RECOVERY_POLL_SECONDS", 5, minimum=0.1),
        fencing_recovery_timeout_seconds=_number(env, "NODEWARDEN_FENCING_RECOVERY_TIMEOUT_SECONDS", 600, minimum=1),
        fencing_resync_seconds=_number(env, "NODEWARDEN_FENCING_RESYNC_SECONDS", 30, minimum=1),
        fencing_release_timeout_seconds=_number(env, "NODEWARDEN_FENCING_RELEASE_TIMEOUT_SECONDS", 600, minimum=1),
        fencing_queue_timeout_seconds=_number(env, "NODEWARDEN_FENCING_QUEUE_TIMEOUT_SECONDS", 1800, minimum=1),
        fencing_count_interval_seconds=_number(env, "NODEWARDEN_FENCING_COUNT_INTERVAL_SECONDS", 30, minimum=1),
        fencing_count_max_age_seconds=_number(env, "NODEWARDEN_FENCING_COUNT_MAX_AGE_SECONDS", 90, minimum=1),
        fencing_policy_cache_seconds=min(30.0, _number(env, "NODEWARDEN_FENCING_POLICY_CACHE_SECONDS", 2)),
        replacement_timeout_seconds=_number(env, "NODEWARDEN_REPLACEMENT_TIMEOUT_SECONDS", 1800, minimum=1),
        machine_poll_seconds=_number(env, "NODEWARDEN_MACHINE_POLL_SECONDS", 2, minimum=0.1),
        machine_launch_visibility_seconds=_number(env, "NODEWARDEN_MACHINE_LAUNCH_VISIBILITY_SECONDS", 60),
        machine_launch_budget_seconds=min(1.5, _number(env, "NODEWARDEN_MACHINE_LAUNCH_BUDGET_SECONDS", 1.0)),
        machine_detach_wait_seconds=_number(env, "NODEWARDEN_MACHINE_DETACH_WAIT_SECONDS", 330),
        machine_volume_detach_timeout_seconds=_number(env, "NODEWARDEN_MACHINE_VOLUME_DETACH_TIMEOUT_SECONDS", 360),
        machine_terminate_retry_seconds=_number(env, "NODEWARDEN_MACHINE_TERMINATE_RETRY_SECONDS", 60, minimum=1),
        leaked_instance_grace_seconds=_number(env, "NODEWARDEN_LEAKED_INSTANCE_GRACE_SECONDS", 600),
        leaked_instance_check_seconds=_number(env, "NODEWARDEN_LEAKED_INSTANCE_CHECK_SECONDS", 60, minimum=1),
        provisioning_poll_seconds=_number(env, "NODEWARDEN_PROVISIONING_POLL_SECONDS", 0.5, minimum=0.1),
        consolidation_check_seconds=_number(env, "NODEWARDEN_CONSOLIDATION_CHECK_SECONDS", 5, minimum=0.5),
        batch_idle_seconds=_number(env, "NODEWARDEN_BATCH_IDLE_SECONDS", 1),
        batch_max_seconds=_number(env, "NODEWARDEN_BATCH_MAX_SECONDS", 10),
        error_backoff_seconds=_number(env, "NODEWARDEN_ERROR_BACKOFF_SECONDS", 5, minimum=0.1),
        error_backoff_max_seconds=_number(env, "NODEWARDEN_ERROR_BACKOFF_MAX_SECONDS", 300, minimum=1),
        extra={k: v for k, v in env.items() if k.startswith("NODEWARDEN_")},
    )))
