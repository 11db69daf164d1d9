"""The hook server's settings (hooks/config.py)."""
from __future__ import annotations

import pytest

from hooks.config import ConfigError, load_settings


def test_settings_reject_unreadable_values_by_name():
    with pytest.raises(ConfigError, match="NODEWARDEN_DRAIN_POLL_SECONDS"):
        load_settings({"NODEWARDEN_DRAIN_POLL_SECONDS": "soon"})
    with pytest.raises(ConfigError, match="NODEWARDEN_DETACH_CONTROL_PLANE"):
        load_settings({"NODEWARDEN_DETACH_CONTROL_PLANE": "maybe"})
