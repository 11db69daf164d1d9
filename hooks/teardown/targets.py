"""What of discovery's answer a finalize call deletes: ours only, in task order, within the work budget."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks.config import Settings
from hooks.ec2_names import SHUTTING_DOWN
from hooks.plan import Action, Collectable
from hooks.teardown.plan import verdict
from hooks.teardown.scope import Scope
from hooks.teardown.tasks import EC2_INSTANCE, EIP, ENI, TASK_ORDER, deletion_order

DELETE = "aws.delete"
# Kinds whose delete is proven right before it runs, from the resource read again: an
# instance still carries its Machine's tags, an ENI is still available, an Elastic IP
# still unassociated (hooks.plan.Collectable).
REREAD_KINDS = (EC2_INSTANCE, ENI, EIP)


@dataclass(frozen=True)
class Target:
    kind: str
    id: str
    task: str
    stage: int
    made_by: str
    state: str | None
    waiting: str = ""  # why it cannot be deleted yet (hooks.teardown_names.WAITED_FOR), "" when it can
    # Waited for past the wait limit (hooks.teardown.progress): left where it is, and holds nothing.
    given_up: bool = False

    @property
    def deletable(self) -> bool:
        return not self.waiting

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.id)


def select_targets(scope: Scope, found: dict, now: dt.datetime) -> list[Target]:
    """What discovery found that this GC deletes, now or once free (hooks.teardown.plan.verdict), in task order."""
    targets = []
    for item in sorted(found.get("resources") or [], key=deletion_order):
        judged = verdict(scope, item, now)
        if judged.collected:
            targets.append(Target(item["kind"], item["id"], judged.task, TASK_ORDER.index(judged.task),
                                  judged.made_by, item.get("state"), judged.keep))
    return targets


def plan_deletes(targets: list[Target], scope: Scope, settings: Settings) -> list[Action]:
    """Delete actions within the work budget; a task starts only once every earlier one is planned whole."""
    budget = settings.gc_max_deletes_per_call
    actions: list[Action] = []
    for stage in sorted({t.stage for t in targets}):
        in_stage = [t for t in targets if t.stage == stage and not t.given_up]
        ready = [t for t in in_stage if t.deletable]
        for t in ready[: budget - len(actions)]:
            params = {"kind": t.kind, "task": t.task, "stage": t.stage, "region": scope.region, "madeBy": t.made_by}
            requires = ()
            if t.kind in REREAD_KINDS:
                requires = (Collectable(t.kind, t.id, scope.cluster_name, scope.region, scope.include_lb_controller),)
            actions.append(Action(DELETE, t.id, params, requires=requires))
        if len(actions) >= budget or len(ready) < len(in_stage):
            break
    return actions


def on_the_way_out(targets: list[Target]) -> bool:
    """Something of the cluster's own is still going: an instance shutting down, or a target deletable now in
    a task the deletion has reached (up to the first one that waits). Waiting for what something else holds
    counts only while nothing is."""
    for stage in sorted({t.stage for t in targets if not t.given_up}):
        in_stage = [t for t in targets if t.stage == stage and not t.given_up]
        if any(t.deletable or (t.kind == EC2_INSTANCE and t.state == SHUTTING_DOWN) for t in in_stage):
            return True
        if not all(t.deletable for t in in_stage):
            return False
    return False


def still_collected(targets: list[Target]) -> list[Target]:
    """The targets cluster-gc still deletes, now or once free: all but those it gave up waiting for."""
    return [t for t in targets if not t.given_up]


def summarize(targets: list[Target]) -> str:
    """``load-balancer=2,target-group=5`` in task order, or ``none``."""
    counts = {task: sum(1 for t in targets if t.task == task) for task in TASK_ORDER}
    return ",".join(f"{task}={n}" for task, n in counts.items() if n) or "none"
