"""Task-queue fairness on the dev server signoff starts (signoff/devserver.py TUNING): a backlog
is dispatched per fairness key in turn, so the few runs of one user queued behind many of
another's are taken among the first, not after them; signoff gives each run its user as the key
(service/temporal.py ``fair_share``)."""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.worker import Worker

from signoff.service.temporal import fair_share

TAKEN: list[str] = []  # the users of the workflows in the order their first task ran


@workflow.defn(sandboxed=False)
class Note:
    @workflow.run
    async def run(self, user: str) -> None:
        if not workflow.unsafe.is_replaying():
            TAKEN.append(user)


async def test_a_users_few_runs_are_not_queued_behind_anothers_backlog(temporal_client, task_queue) -> None:
    TAKEN.clear()
    big, small = "user-with-a-backlog", "user-with-two-runs"
    for i in range(30):  # no worker yet: all wait in the task queue's backlog
        await temporal_client.start_workflow(Note.run, big, id=f"{task_queue}-big-{i}", task_queue=task_queue,
                                             priority=fair_share(big))
    for i in range(2):
        await temporal_client.start_workflow(Note.run, small, id=f"{task_queue}-small-{i}", task_queue=task_queue,
                                             priority=fair_share(small))
    async with Worker(temporal_client, task_queue=task_queue, workflows=[Note], max_concurrent_workflow_tasks=1,
                      max_concurrent_workflow_task_polls=1, max_cached_workflows=0):
        while len(TAKEN) < 32:
            await asyncio.sleep(0.05)
    places = [i for i, user in enumerate(TAKEN) if user == small]
    # in turns: one of each key while both wait (first in, first out would be 30 and 31)
    assert places and max(places) < 6, TAKEN


async def test_the_workers_activity_slots_are_a_setting(temporal_client, task_queue, tmp_path) -> None:
    """SIGNOFF_WORKER_MAX_ACTIVITIES: what one worker runs at once; more wait in the task queue,
    where fairness hands them out by user in turn."""
    from signoff.engine.settings import Settings
    from signoff.engine.store.memory import MemoryStore
    from signoff.worker import build_worker

    for slots in (8, 100):
        worker = build_worker(temporal_client, MemoryStore(), Settings(home=tmp_path, worker_max_activities=slots),
                              task_queue=f"{task_queue}-{slots}")
        assert worker.config()["max_concurrent_activities"] == slots
