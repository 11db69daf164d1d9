"""The hook server's settings (hooks/config.py)."""
from __future__ import annotations

import pytest

from hooks.config import ConfigError, load_settings


def test_settings_reject_unreadable_values_by_name():
    with pytest.raises(ConfigError, match="NODEWARDEN_DRAIN_POLL_SECONDS"):
        load_settings({"NODEWARDEN_DRAIN_POLL_SECONDS": "soon"})
    with pytest.raises(ConfigError, match="NODEWARDEN_DETACH_CONTROL_PLANE"):
        load_settings({"NODEWARDEN_DETACH_CONTROL_PLANE": "maybe"})


def test_provisioning_settings_default_and_read():
    default = load_settings({})
    assert (default.provisioning_poll_seconds, default.batch_idle_seconds, default.batch_max_seconds) == (0.5, 1, 10)
    read = load_settings({"NODEWARDEN_PROVISIONING_POLL_SECONDS": "2", "NODEWARDEN_BATCH_IDLE_SECONDS": "0",
                          "NODEWARDEN_BATCH_MAX_SECONDS": "30"})
    assert (read.provisioning_poll_seconds, read.batch_idle_seconds, read.batch_max_seconds) == (2, 0, 30)
    with pytest.raises(ConfigError, match="NODEWARDEN_PROVISIONING_POLL_SECONDS"):
        load_settings({"NODEWARDEN_PROVISIONING_POLL_SECONDS": "0"})
    with pytest.raises(ConfigError, match="NODEWARDEN_BATCH_MAX_SECONDS"):
        load_settings({"NODEWARDEN_BATCH_IDLE_SECONDS": "5", "NODEWARDEN_BATCH_MAX_SECONDS": "2"})
