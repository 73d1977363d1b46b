"""The bare Temporal baseline of bench/overhead.py: no-op activities and a gate-shaped
workflow, with nothing of signoff (a module of its own so the workflow sandbox imports only
temporalio)."""

from __future__ import annotations

import time
from datetime import timedelta

from temporalio import activity, workflow

waiting: dict[str, float] = {}


@activity.defn(name="noop")
async def noop(arg: str) -> str:
    return arg


@activity.defn(name="mark_waiting")
async def mark_waiting(wf_id: str) -> None:
    waiting[wf_id] = time.perf_counter()


@workflow.defn(name="BareLayers")
class BareLayers:
    @workflow.run
    async def run(self, n: int, local: bool) -> int:
        for i in range(n):
            await _call(local, "noop", str(i))
        return n


@workflow.defn(name="BareGate")
class BareGate:
    def __init__(self) -> None:
        self.decided = False

    @workflow.run
    async def run(self, local: bool) -> str:
        await _call(local, "noop", "a")
        await _call(local, "noop", "b")
        await _call(local, "mark_waiting", workflow.info().workflow_id)
        await workflow.wait_condition(lambda: self.decided)
        await _call(local, "noop", "c")
        await workflow.wait_condition(workflow.all_handlers_finished)
        return "done"

    @workflow.update
    async def resume(self, action: str) -> str:
        self.decided = True
        return action


async def _call(local: bool, name: str, arg: str):
    if local:
        return await workflow.execute_local_activity(name, arg, start_to_close_timeout=timedelta(seconds=30))
    return await workflow.execute_activity(name, arg, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn(name="BareGateMin")
class BareGateMin:
    """The least a durable gate can cost: one activity to the pause (it marks the run waiting,
    as signoff's first layer persists the pause), wait for an Update, one activity to the end."""

    def __init__(self) -> None:
        self.decided = False

    @workflow.run
    async def run(self, local: bool) -> str:
        await _call(local, "mark_waiting", workflow.info().workflow_id)
        await workflow.wait_condition(lambda: self.decided)
        await _call(local, "noop", "c")
        await workflow.wait_condition(workflow.all_handlers_finished)
        return "done"

    @workflow.update
    async def resume(self, action: str) -> str:
        self.decided = True
        return action
