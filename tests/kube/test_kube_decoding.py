"""Threads decoding into a lightkube model type for the first time, at once, in a fresh process.

Without hooks.kube.decoding the process dies with SIGSEGV in msgspec (eight
threads at a barrier crashed it in every one of 60 runs); a crash can only be
seen from outside the process, so each case runs in a fresh interpreter.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from devcluster.layout import REPO as ROOT

CASE = textwrap.dedent("""
    import json, sys, threading
    from hooks.kube import client  # what every hook process imports before it reads the API
    from lightkube.core import decoders
    from lightkube.resources.core_v1 import Node, Pod

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}}
    pods = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                       "items": [pod] * 3}).encode()
    node = json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}).encode()
    status = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                         "code": 404}).encode()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can: the worst case, every run
    reads = {"pods": lambda: decoders.decode_list(pods, Pod), "node": lambda: decoders.decode_object(node, Node),
             "status": lambda: decoders.decode_status(status)}
    read = reads[sys.argv[1]]
    barrier = threading.Barrier(8)
    results = []

    def work():
        barrier.wait()
        results.append(read())

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8, results
    print(type(results[0]).__name__)
""")


@pytest.mark.parametrize("kind, decoded", [("pods", "tuple"), ("node", "Node"), ("status", "Status")])
def test_eight_threads_decoding_one_type_first_at_once_all_get_it(kind, decoded):
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", CASE, kind], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
        assert done.stdout.strip() == decoded


def test_a_body_that_does_not_validate_still_raises_and_later_decodes_run_unlocked():
    import msgspec
    from lightkube.core import decoders
    from lightkube.resources.core_v1 import Node

    from hooks.kube import decoding

    decoding.install()
    with pytest.raises(msgspec.ValidationError):
        decoders.decode_object(b'{"metadata": {"name": 5}}', Node)
    assert Node in decoding._ready
    with decoding._lock:  # held: a type already built must not wait for it
        assert decoders.decode_object(b'{"metadata": {"name": "n"}}', Node).metadata.name == "n"
