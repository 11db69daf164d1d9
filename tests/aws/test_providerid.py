"""providerIDs: an instance and its region read from a Node's spec.providerID (hooks/providerid.py)."""
from __future__ import annotations

import pytest

from hooks import providerid


@pytest.mark.parametrize("value,instance,region", [
    ("aws:///us-east-1a/i-0abc12345678", "i-0abc12345678", "us-east-1"),
    ("aws:////i-0abc12345678", "i-0abc12345678", None),
    ("aws:///eu-central-1b/i-0123456789abcdef0", "i-0123456789abcdef0", "eu-central-1"),
    ("aws:///us-east-1-bos-1a/i-0abc12345678", "i-0abc12345678", "us-east-1"),
])
def test_provider_ids(value, instance, region):
    pid = providerid.parse(value)
    assert (pid.instance_id, pid.region) == (instance, region)


@pytest.mark.parametrize("value", [None, "", "gce://p/z/vm", "aws:///us-east-1a/", "aws:///us-east-1a/vol-123"])
def test_bad_provider_ids(value):
    with pytest.raises(providerid.ProviderIDError):
        providerid.parse(value)
