"""kube-scheduler's command line on the local stack: as it ships, or with the bin-packing profile."""
from __future__ import annotations

import json

import pytest

from devcluster import components
from devcluster.layout import Layout


def _ports() -> components.Ports:
    return components.Ports(**components.Ports.PREFERRED)


def test_the_default_scoring_runs_kube_scheduler_as_it_ships(tmp_path):
    flags = components.kube_scheduler(Layout(workdir=tmp_path), _ports())
    assert not any(f.startswith("--config=") for f in flags)
    assert f"--kubeconfig={Layout(workdir=tmp_path).kubeconfig}" in flags


def test_the_bin_packing_profile_scores_most_allocated_on_cpu_and_memory(tmp_path):
    layout = Layout(workdir=tmp_path)
    flags = components.kube_scheduler(layout, _ports(), components.MOST_ALLOCATED)
    [config_flag] = [f for f in flags if f.startswith("--config=")]
    assert not any(f.startswith(("--kubeconfig=", "--leader-elect=")) for f in flags), "the file says them"
    config = json.loads(open(config_flag.split("=", 1)[1]).read())
    assert config["clientConnection"]["kubeconfig"] == str(layout.kubeconfig)
    assert config["leaderElection"] == {"leaderElect": False}
    [profile] = config["profiles"]
    [fit] = [p for p in profile["pluginConfig"] if p["name"] == "NodeResourcesFit"]
    assert fit["args"]["scoringStrategy"]["type"] == "MostAllocated"
    assert {r["name"] for r in fit["args"]["scoringStrategy"]["resources"]} == {"cpu", "memory"}


def test_an_unknown_scoring_is_refused(tmp_path):
    with pytest.raises(ValueError):
        components.kube_scheduler(Layout(workdir=tmp_path), _ports(), "Whatever")
