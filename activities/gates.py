"""A waiting request's own events: one approver's vote of a quorum (``record_vote``) and the
gate's timers (``gate_timer``: a reminder, the escalation, the deadline of ``on_timeout: fail``),
each written only while the request waits, once.
"""

from __future__ import annotations


from functools import partial

from temporalio import activity

from signoff.activities.failures import to_failure
from signoff.activities.sender import sender
from signoff.activities.types import (
    GateTimerInput,
    GateTimerOutput,
    RecordVoteInput,
    RecordVoteOutput,
)
from signoff.activities.notify import NotifyActivities
from signoff.engine.decisions import (
    check_decision,
    user_ref,
    with_defaults,
)
from signoff.engine.errors import (
    NotResumable,
    SignoffError,
)
from signoff.engine.attempt import vote_data
from signoff.engine.audit.receipts import ReceiptDraft
from signoff.engine.models import JobStatus, Vote


class GateActivities(NotifyActivities):
    @activity.defn(name="record_vote")
    async def record_vote(self, inp: RecordVoteInput) -> RecordVoteOutput:
        """One approver's vote on a request that needs several: checked as their HTTP resume is,
        then the ``human_input_vote`` event, written only while the request still waits (one
        transaction), once per person (a retry finds its own vote). ``check_only`` (the vote that
        completes the quorum): checked, not written; resume_run writes it with the resolution."""
        try:
            job = await self._job(inp.job_id)
            person, authority = await self._decider_authority(job, inp.request_id, inp.user or inp.decided_by)
            votes = await self.access.votes(job.job_id, inp.request_id)
            mine = next((v for v in votes if v.user == person.id), None)
            if mine is not None:
                # a retry that found its vote recorded: the participant again, idempotent (a vote
                # is written after its participant below; this covers one recorded otherwise)
                await self.store.add_participants(job.job_id, [person.id])
            else:
                pending = await self.access.current_request(job, inp.request_id)
                check_decision(pending, inp.request_id, inp.decision, waiting=job.status == JobStatus.suspended,
                               decider=await self.access.decider(job, person, pending), votes=votes,
                               max_items=self.settings.max_value_items)
                assert pending is not None
                mine = Vote(user=person.id, action_id=inp.decision.action_id,
                            values=with_defaults(pending, inp.decision.action_id, inp.decision.values), at=inp.now)
                if inp.check_only:
                    return RecordVoteOutput(vote=mine)
                data = {**vote_data(inp.request_id, mine, len(votes) + 1, pending.required_approvals),
                        **sender(inp)}
                key = f"vote:{inp.request_id}:{person.id}"
                # the participant first: whoever the vote's event wakes (the header's live count,
                # RunService.voted_waiting) finds it recorded (a decider may see the run anyway)
                await self.store.add_participants(job.job_id, [person.id])
                signing = await self.receipt_keys.signing()
                draft = ReceiptDraft.of(job_id=job.job_id, flow_id=job.flow_id, flow_version=job.flow_version,
                                        pending=pending, key=key, action_id=mine.action_id, values=mine.values,
                                        decided_by={"id": person.id, "name": person.name},
                                        authority=authority or "approver", via=data.get("via"),
                                        at=mine.at.isoformat())
                if await self.store.append_event_if_waiting(
                        job.job_id, inp.request_id, "human_input_vote", data, dedupe_key=key,
                        receipt=partial(draft.signed, key_id=signing.key_id, private=signing.private)) is None:
                    raise NotResumable("The request no longer waits for votes", job_id=job.job_id)
            return RecordVoteOutput(vote=mine, deliveries=await self._deliveries(
                job, "human_input_vote", inp.request_id, job.pending))
        except SignoffError as err:
            raise to_failure(err) from None

    @activity.defn(name="gate_timer")
    async def gate_timer(self, inp: GateTimerInput) -> GateTimerOutput:
        """A timer of a waiting request fired (DESIGN §9): a reminder, the escalation (its
        approvers added once), or the deadline of ``on_timeout: fail`` (``human_input_expired``
        before the run ends). Each event is written only while the request waits, once."""
        job = await self._job(inp.job_id)
        pending = await self.access.current_request(job, inp.request_id)
        refs: list[str] = []
        if inp.kind == "reminder":
            event, data, key = "human_input_reminder", {"request_id": inp.request_id, "reminder": inp.n}, f"remind:{inp.n}"
        elif inp.kind == "escalation":
            owner = await self._flow_owner(job)
            added = await self.access.approver_refs(owner, inp.escalate_to)
            if pending is not None and not (pending.approvers or pending.approver_refs):
                # nobody named: the run's owner decided; the escalation adds people to the owner
                added = [user_ref(job.user_id), *added]
            refs = await self.store.add_request_approvers(job.job_id, inp.request_id, added)
            event, data, key = "human_input_escalated", {"request_id": inp.request_id, "added": inp.escalate_to}, "escalate"
        else:
            event, key = "human_input_expired", "expired"
            data = {"request_id": inp.request_id, "requested_action": None, "rerouted_to": None,
                    "timeout_seconds": pending.timeout_seconds if pending else None}
        seq = await self.store.append_event_if_waiting(job.job_id, inp.request_id, event, data,
                                                       dedupe_key=f"{key}:{inp.request_id}")
        deliveries = await self._deliveries(job, event, inp.request_id, pending, seq) if seq is not None else []
        return GateTimerOutput(written=seq is not None, approver_refs=refs, deliveries=deliveries)


