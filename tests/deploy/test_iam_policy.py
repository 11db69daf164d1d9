"""docs/iam-policy.json lists exactly the AWS actions the code calls.

The code's calls are found by reading hooks/ for ``.<operation>(`` (or
``.<operation>,`` when a client method is handed to a helper), ``paged_ids(client, "<operation>"`` and
``get_paginator("<operation>")`` of the services we use, with the operation
names botocore itself knows, so a new call without a policy line fails here.
Some calls need more than their own action: IAM authorizes those parts of the
call separately (``IMPLIED``), and the policy holds them only while the call
is made.

The policy is a template: ``<cluster-name>`` stands for NODEWARDEN_CLUSTER_NAME
(left in, it matches no tag key, so the power actions it guards are refused).
Actions the code takes only on this cluster's instances carry a condition on
the cluster's tag where AWS supports one (``TAG_CONDITIONED``).
"""
from __future__ import annotations

import json
import pathlib
import re

import botocore.session
from botocore import xform_name

ROOT = pathlib.Path(__file__).parents[2]
# boto3 service name -> IAM action prefix
SERVICES = {"elbv2": "elasticloadbalancing", "elb": "elasticloadbalancing", "ec2": "ec2",
            "resourcegroupstaggingapi": "tag", "sqs": "sqs", "pricing": "pricing", "autoscaling": "autoscaling"}
# Actions AWS checks as part of another call: RunInstances with TagSpecifications
# needs ec2:CreateTags, and with an instance profile iam:PassRole on its role.
IMPLIED = {"ec2:RunInstances": {"ec2:CreateTags", "iam:PassRole"}}
# Fencing powers an instance off or on only when it carries the cluster's tag (hooks/aws/ec2_power.py); the
# policy says so too, so a Node's providerID naming another cluster's instance is refused by AWS as well.
CLUSTER_PLACEHOLDER = "<cluster-name>"
TAG_CONDITIONED = {"ec2:StopInstances", "ec2:StartInstances"}
CLUSTER_TAG_CONDITION = {"StringEquals": {f"ec2:ResourceTag/kubernetes.io/cluster/{CLUSTER_PLACEHOLDER}":
                                          ["owned", "shared"]}}


def _operations():
    session = botocore.session.get_session()
    ops = {}
    for service, prefix in SERVICES.items():
        model = session.get_service_model(service)
        for op in model.operation_names:
            ops.setdefault(xform_name(op), set()).add(f"{prefix}:{op}")
    return ops


def _source():
    return "\n".join(p.read_text() for p in sorted((ROOT / "hooks").rglob("*.py")))


def called_operations() -> dict[str, set[str]]:
    """Each operation name the code calls -> the IAM actions it may be (elb and ec2 share names)."""
    source = _source()
    ops = _operations()
    # Called (``client.op(``) or handed on (``client.op,`` to a helper that calls it).
    used = set(re.findall(r"\.([a-z][a-z0-9_]+)\s*[(,]", source))
    used |= set(re.findall(r"get_paginator\(\s*\"([a-z0-9_]+)\"", source))
    used |= set(re.findall(r"paged_ids\(\s*\w+,\s*\"([a-z0-9_]+)\"", source))  # hooks/aws/gc/resources.py
    used |= set(re.findall(r"^_[A-Z]+ = \(\"([a-z0-9_]+)\",", source, re.M))  # describe tables, hooks/aws/gc/ec2.py
    return {name: ops[name] for name in used & set(ops)}


def policy_actions() -> set[str]:
    policy = json.loads((ROOT / "docs" / "iam-policy.json").read_text())
    found = set()
    for statement in policy["Statement"]:
        acts = statement["Action"]
        found |= set([acts] if isinstance(acts, str) else acts)
    return found


def implied_actions(actions: set[str]) -> set[str]:
    return set().union(*(IMPLIED.get(action, set()) for action in actions))


def test_every_called_operation_is_in_the_policy():
    granted = policy_actions()
    missing = {name: sorted(actions) for name, actions in called_operations().items() if not actions & granted}
    assert not missing, f"docs/iam-policy.json lacks an action for {missing}"
    called = set().union(*called_operations().values())
    missing_implied = sorted(implied_actions(called & granted) - granted)
    assert not missing_implied, f"docs/iam-policy.json lacks {missing_implied}, which calls it grants need"


def test_the_policy_grants_nothing_the_code_does_not_call():
    callable_actions = set().union(*called_operations().values())
    callable_actions |= implied_actions(callable_actions)
    extra = policy_actions() - callable_actions
    assert not extra, f"docs/iam-policy.json grants unused {sorted(extra)}"


def _statements() -> list[dict]:
    return json.loads((ROOT / "docs" / "iam-policy.json").read_text())["Statement"]


def test_power_actions_are_granted_only_on_this_clusters_instances():
    from hooks import ec2_names

    for statement in _statements():
        acts = statement["Action"]
        acts = set([acts] if isinstance(acts, str) else acts)
        if acts & TAG_CONDITIONED:
            assert acts <= TAG_CONDITIONED, f"{statement.get('Sid')}: only the tag-conditioned actions share it"
            assert statement.get("Condition") == CLUSTER_TAG_CONDITION, statement.get("Sid")
    (values,) = CLUSTER_TAG_CONDITION["StringEquals"].values()
    assert sorted(values) == sorted(ec2_names.CLUSTER_TAG_VALUES), \
        "the policy and the code agree on the tag's values"
    assert TAG_CONDITIONED <= policy_actions()
