"""Fixtures of the cluster-gc tests on moto: a hook context on a test clock, and a VPC to build in."""
from __future__ import annotations

import datetime as dt

import pytest

from worlds import cluster_gc as w

START = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)


class Clock:
    """A test clock the driver moves by each requested resync, so backoff shows without sleeping."""

    def __init__(self):
        self.now = START

    def __call__(self):
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds or 0)


@pytest.fixture
def gc_ctx(aws, make_ctx):
    def build(env: dict | None = None):
        kube = w.FakeKube()
        ctx = make_ctx(env=env, kube=kube)
        ctx.clock = Clock()
        return ctx, kube

    return build


@pytest.fixture
def net(aws):
    return w.network(aws("ec2"))
