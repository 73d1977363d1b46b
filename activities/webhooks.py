"""Webhooks: which webhooks get an event of a run (its owner's, and those of the people who may
decide the request, but those who muted the owner), and the delivery of one event to them, to
up to twenty webhooks at once (``deliver_event``: retried by the workflow's policy, each retry
to the webhooks that have not taken it; every attempt logged).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import cached_property

from temporalio import activity

from signoff.activities.base import ActivityBase
from signoff.activities.failures import to_failure
from signoff.activities.types import (
    HOOKS_PER_DELIVERY,
    Delivery,
    EventDelivery,
)
from signoff.engine import webhooks
from signoff.engine.context import egress_policy
from signoff.engine.groupcommit import GroupCommit
from signoff.engine.models import DeliveryAttempt, Event, Job, PendingRequest, WebhookDelivery, WebhookRecord
from signoff.engine.store.base import DecisionReads


@dataclass(frozen=True)
class RunOwner:
    """What a run's deliveries need of its job (its id, its owner) when the job was not read:
    a pause written in one store call (activities/layers.py)."""

    job_id: str
    user_id: str
    pending: PendingRequest | None = None  # the request the job now waits for


class WebhookActivities(ActivityBase):
    @cached_property
    def delivery_log(self) -> GroupCommit[DeliveryAttempt, WebhookDelivery]:
        """The deliveries' log: the attempts that end while another's log is written go in the
        next write together (engine/groupcommit.py); each delivery returns once its own is
        durable."""
        return GroupCommit(self.store.log_deliveries)

    @activity.defn(name="deliver_event")
    async def deliver_event(self, inp: EventDelivery) -> None:
        """One event to some webhooks, POSTed at once (retried with backoff by the workflow's
        policy, each retry to the webhooks that have not taken it yet); every attempt is
        logged, those of one attempt together. A webhook deleted meanwhile gets nothing."""
        await self._deliver(inp.job_id, inp.seq, inp.webhook_ids[:HOOKS_PER_DELIVERY])

    @activity.defn(name="deliver_webhook")
    async def deliver_webhook(self, inp: Delivery) -> None:
        """One event to one webhook: as deliver_event (which the workflow schedules now) for a
        run whose history scheduled this one."""
        await self._deliver(inp.job_id, inp.seq, [inp.webhook_id])

    async def _deliver(self, job_id: str, seq: int, webhook_ids: list[str]) -> None:
        attempt = activity.info().attempt
        job = await self.store.get_job(job_id)
        events = await self.store.read_events(job_id, after_seq=seq - 1, limit=1)
        if job is None or not events:
            return
        event = events[0]
        done = await self.store.delivered_webhooks(job_id, event.seq) if attempt > 1 else set()
        wanted = list(dict.fromkeys(i for i in webhook_ids if i not in done))
        hooks = [h for h in await asyncio.gather(*(self.store.get_webhook(i) for i in wanted)) if h is not None]
        if not hooks:
            return
        body = webhooks.payload(event, job, webhooks.card_url(self.settings.effective_api_url, job.job_id,
                                                              event.data.get("request_id")))
        policy = egress_policy(self.settings.egress_allow)

        async def post(hook: WebhookRecord) -> str | None:
            """POST to one webhook and log the attempt as soon as it ends (a slow or broken
            endpoint never holds back the log of the others, which a retry then skips); the
            error, if it did not take the event."""
            try:
                status = await webhooks.post(hook.url, body, self.vault.box.open(hook.secret_ciphertext),
                                             event=event.event, delivery_id=f"{job.job_id}:{event.seq}:{hook.id}",
                                             policy=policy)
            except webhooks.DeliveryFailed as err:
                status, error = err.details.get("status_code"), err.message
            except Exception as err:  # noqa: BLE001 - e.g. a secret sealed under another key: its own failure
                status, error = None, f"{type(err).__name__}: {err}"
            else:
                error = None
            await self.delivery_log.add(self._attempt(hook, event, attempt, status, error))
            return error

        failed = [e for e in await asyncio.gather(*(post(h) for h in hooks)) if e is not None]
        if failed:
            raise to_failure(webhooks.DeliveryFailed(
                f"{len(failed)} of {len(hooks)} webhooks did not take the event: {failed[0]}")) from None

    @staticmethod
    def _attempt(hook: WebhookRecord, event: Event, attempt: int, status_code: int | None,
                 error: str | None) -> DeliveryAttempt:
        return DeliveryAttempt(webhook_id=hook.id, event=event.event, job_id=event.job_id, seq=event.seq,
                               attempt=attempt, status_code=status_code, error=error, delivered=error is None)

    async def _seq_of(self, job_id: str, event: str, request_id: str) -> int | None:
        """The seq of the last ``event`` about ``request_id``."""
        found = [e.seq for e in await self.store.read_events(job_id)
                 if e.event == event and e.data.get("request_id") == request_id]
        return found[-1] if found else None

    async def _deliveries(self, job: Job | RunOwner, event: str, request_id: str, pending: PendingRequest | None,
                          seq: int | None = None, *, reads: DecisionReads | None = None) -> list[Delivery]:
        """The webhooks that get the last ``event`` about ``request_id``: those of the run's owner
        and of the people who may decide the request (DESIGN §9). Nothing is read when nobody
        has a webhook for that event. ``reads``: those people's webhooks as the event's own write
        read them (Store.mark_suspended's ``reads``: not read again)."""
        if reads is not None and reads.webhooks is not None:
            hooks = [h for h in reads.webhooks if event in h.events or "*" in h.events]
        else:
            people = {job.user_id}
            if pending is not None:
                refs = await self.store.request_approvers(job.job_id, pending.request_id) or pending.approver_refs
                people |= await self.access.people(refs)
            hooks = await self.store.webhooks_for(sorted(await self._not_muting(job, people)), event)
        if not hooks:
            return []
        seq = seq if seq is not None else await self._seq_of(job.job_id, event, request_id)
        if seq is None:
            return []
        return [Delivery(webhook_id=h.id, job_id=job.job_id, seq=seq) for h in hooks]

    async def _decision_reads(self, job: Job | RunOwner, request: PendingRequest | None) -> DecisionReads:
        """What the deliveries of a decision on ``request`` need, for the decision's own write to
        read (Store.record_decision's ``reads``): the webhooks of the people who get its events
        (the owner and the people who could decide it, but those muting the owner)."""
        return DecisionReads(owners=await self._webhook_owners(job, request))

    async def _webhook_owners(self, job: Job | RunOwner, request: PendingRequest | None) -> list[str]:
        """Whose webhooks get an event about ``request``: the run's owner and the people the
        request names (its approvers as given), but those muting the owner."""
        people = {job.user_id}
        if request is not None and request.approver_refs:
            people |= await self.access.people(request.approver_refs)
        return sorted(await self._not_muting(job, people))

    async def _decision_deliveries(self, job: Job, request: PendingRequest | None,
                                   written: list[tuple[str, int]], reads: DecisionReads | None = None
                                   ) -> list[Delivery]:
        """The webhook deliveries of a decision's events (``written``: (name, seq) of the vote
        that completed a quorum, expired, decided), to the owner's webhooks and those of the
        people who could decide ``request`` (its approvers as they were read for the check).
        ``reads``: as the decision's write read them (their webhooks: nothing read again here)."""
        if reads is None or reads.webhooks is None:
            reads = await self._decision_reads(job, request)
            hooks = {event: await self.store.webhooks_for(reads.owners, event) for event, _ in written}
        else:
            hooks = {event: [h for h in reads.webhooks if event in h.events or "*" in h.events] for event, _ in written}
        return [Delivery(webhook_id=h.id, job_id=job.job_id, seq=seq) for event, seq in written for h in hooks[event]]

    async def _not_muting(self, job: Job | RunOwner, people: set[str]) -> set[str]:
        """``people`` but those who muted the run's owner (their webhooks get none of the owner's
        requests; docs/security.md, "Fan-out and approvers"). The owner always gets their own."""
        others = sorted(people - {job.user_id})
        return people - await self.store.muted_by(job.user_id, others) if others else people

