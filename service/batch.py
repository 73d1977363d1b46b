"""Many decisions in one call (DESIGN §17, ``POST /api/v2/workflows/resume-batch`` and the
inbox's bulk action): each item is a decision of its own, through :meth:`RunService.resume`
like any single one (its own access check, its own checks, its own claim), so a batch can never
apply a decision twice nor one a single resume would refuse, whatever races it (a resume of the
same request elsewhere, the ``resume`` Update through Temporal, a stop).

What a batch adds is bounded: at most ``concurrency`` of its items are under way at once (a
batch of 100 is not 100 Updates, claims and store reads started together on the event loop),
and each item is admitted by the caller's ``admit`` first (the API's write budget: a batch of
100 is 100 writes, never a way around SIGNOFF_WRITE_RATE). Items are admitted in order, so
when the budget runs out it is the last items that are refused, each as a single resume past
the budget would be.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from signoff.engine.errors import SignoffError
from signoff.engine.models import Decision, User
from signoff.service.backend import Resumed

log = logging.getLogger("signoff.service")

MAX_ITEMS = 100  # the most decisions one batch may carry (DESIGN §17)


@dataclass(frozen=True)
class BatchItem:
    job_id: str
    request_id: str
    decision: Decision


# What became of one item: what the decision did, or why it was refused (the error a single
# resume of it would have raised). Anything else a resume raised (a bug, a database failure
# that is not a SignoffError) is re-raised by no one: it is that item's Exception, logged.
Outcome = Resumed | SignoffError | Exception


async def resume_batch(resume: Callable[[User, str, str, Decision], Awaitable[Resumed]], user: User,
                       items: Sequence[BatchItem | SignoffError], *, concurrency: int,
                       admit: Callable[[int], Awaitable[None]] | None = None) -> list[Outcome]:
    """Apply each item's decision for ``user`` through ``resume`` (``RunService.resume``), at most
    ``concurrency`` at once; one outcome per item, in the items' order. An item that is already
    an error (refused by the caller's own checks, e.g. a body limit) is its own outcome and
    takes no turn. ``admit(i)`` is awaited, in order, before item ``i`` starts: it may wait (a
    paced write budget) or raise a SignoffError (RateLimited), which is that item's outcome."""
    outcomes: list[Outcome | None] = [None] * len(items)
    turns = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int, item: BatchItem) -> None:
        try:
            outcomes[i] = await resume(user, item.job_id, item.request_id, item.decision)
        except SignoffError as err:
            outcomes[i] = err
        except Exception as err:  # noqa: BLE001 - one item's failure must not cost the others theirs
            log.exception("batch decision on job %s failed", item.job_id)
            outcomes[i] = err
        finally:
            turns.release()

    running: list[asyncio.Task[None]] = []
    try:
        for i, item in enumerate(items):
            if isinstance(item, SignoffError):
                outcomes[i] = item
                continue
            if admit is not None:
                try:
                    await admit(i)
                except SignoffError as err:
                    outcomes[i] = err
                    continue
            await turns.acquire()  # a free turn before the item starts: never more under way
            running.append(asyncio.create_task(one(i, item), name=f"signoff-batch-{item.job_id}"))
        await asyncio.gather(*running)
    finally:
        for task in running:  # the caller went away (its request cancelled): so do its items
            task.cancel()
    return [o if o is not None else SignoffError("not decided") for o in outcomes]
