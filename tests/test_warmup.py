"""A hook process warms its clients and the policies' copy before the first call, and never fails doing so."""
from __future__ import annotations

from hooks import warmup
from hooks.fencing import names, policy_cache
from tests.fake_kube import FakeKube


def test_warm_up_makes_the_clients_and_lists_the_policies(make_ctx, monkeypatch):
    made = []
    kube = FakeKube([{"apiVersion": names.API_VERSION, "kind": names.POLICY_KIND,
                      "metadata": {"name": "p", "uid": "u"}, "spec": {}}])
    ctx = make_ctx(kube=kube)
    monkeypatch.setattr(ctx.aws, "client", lambda service, region=None: made.append(service))
    monkeypatch.setattr(policy_cache, "CACHE", policy_cache.PolicyCache())
    warmup.start(ctx).join(10)
    assert made == list(warmup.SERVICES)
    assert list(policy_cache.CACHE.policies(kube, 3600)) == ["p"]
    assert len([c for c in kube.calls if c[0] == "list"]) == 1, "the warm-up's list serves the first call"


def test_warm_up_with_nothing_reachable_ends_quietly(make_ctx, monkeypatch):
    ctx = make_ctx(kube=FakeKube(unavailable=True))

    def refuse(service, region=None):
        raise RuntimeError("no region")
    monkeypatch.setattr(ctx.aws, "client", refuse)
    thread = warmup.start(ctx)
    thread.join(10)
    assert not thread.is_alive()
