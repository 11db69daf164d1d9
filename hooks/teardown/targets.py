"""What of discovery's answer a finalize call deletes: ours only, in task order, within the work budget."""
from __future__ import annotations

from dataclasses import dataclass

from hooks.config import Settings
from hooks.plan import Action
from hooks.teardown.ownership import made_by
from hooks.teardown.scope import Scope
from hooks.teardown.tasks import KIND_TASK, TASK_ORDER, VOL

DELETE = "aws.delete"


@dataclass(frozen=True)
class Target:
    kind: str
    id: str
    task: str
    stage: int
    made_by: str
    state: str | None

    @property
    def deletable(self) -> bool:
        # A volume is deleted only once nothing uses it ("available").
        return self.kind != VOL or self.state == "available"

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.id)


def select_targets(scope: Scope, found: dict, settings: Settings) -> list[Target]:
    """What discovery found that this GC deletes, in task order."""
    targets = []
    for item in found.get("resources") or []:
        kind, tags = item.get("kind"), item.get("tags") or {}
        task = KIND_TASK.get(kind)
        if task not in scope.tasks:
            continue
        maker = made_by(kind, tags, scope.cluster_name, settings.gc_include_lb_controller)
        if maker:
            targets.append(Target(kind, item["id"], task, TASK_ORDER.index(task), maker, item.get("state")))
    return sorted(targets, key=lambda t: (t.stage, t.kind, t.id))


def plan_deletes(targets: list[Target], scope: Scope, settings: Settings) -> list[Action]:
    """Delete actions within the work budget; a task starts only once every earlier one is planned whole."""
    budget = settings.gc_max_deletes_per_call
    actions: list[Action] = []
    for stage in sorted({t.stage for t in targets}):
        in_stage = [t for t in targets if t.stage == stage]
        ready = [t for t in in_stage if t.deletable]
        for t in ready[: budget - len(actions)]:
            params = {"kind": t.kind, "task": t.task, "stage": t.stage, "region": scope.region, "madeBy": t.made_by}
            actions.append(Action(DELETE, t.id, params))
        if len(actions) >= budget or len(ready) < len(in_stage):
            break
    return actions


def summarize(targets: list[Target]) -> str:
    """``load-balancer=2,target-group=5`` in task order, or ``none``."""
    counts = {task: sum(1 for t in targets if t.task == task) for task in TASK_ORDER}
    return ",".join(f"{task}={n}" for task, n in counts.items() if n) or "none"
