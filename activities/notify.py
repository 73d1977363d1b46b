"""Telling people about a request where they are (DESIGN §14): who is told on which channel
(``_notifications``, beside the webhooks of the same event), and the sending of one
notification to one person (``notify_person``, retried by the workflow's policy, every attempt
in the run's notification log).

Who: the request's approvers (groups expanded; with none named, the run's owner), but the owner
when ``allow_self_approval`` is false, anyone who muted the owner, and at a reminder anyone who
voted already; at an escalation only the people it added. Which channels: the Human Input's
``notify`` (default every channel the operator configured), to the people with that contact
verified (a pending one, set by the person and not confirmed, gets nothing: engine/verify.py).
A notification is sent only while the request still waits: one that comes after the decision
sends nothing. When the request is answered (``human_input_decision``; ``human_input_expired``
with nothing to apply), everyone who was told of it is told how it ended (``_closing``): a
short mail to those mailed (but the person who decided), and each Slack message updated to the
outcome, its buttons gone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from temporalio import activity
from temporalio.exceptions import ApplicationError

from signoff.activities.types import Delivery
from signoff.activities.webhooks import RunOwner, WebhookActivities
from signoff.engine import links, mail, slack
from signoff.engine.decisions import deadline, user_ref
from signoff.engine.models import Job, Notification, PendingRequest, utcnow
from signoff.engine.store.base import DecisionReads

log = logging.getLogger(__name__)

# the events a person is told of, and what the mail calls each
TOLD = {"human_input_required": "required", "human_input_reminder": "reminder", "human_input_escalated": "escalated"}
# the events that end a request, told to those who were told of it
CLOSING = ("human_input_decision", "human_input_expired")
# the ends of a run that close the request it waited on (a stop, a supersede, a deleted flow or
# user: run_cancelled; the maximum suspension: run_timed_out), told the same way
ENDS = {"cancelled": "run_cancelled", "timed_out": "run_timed_out"}
TOLD_READ = 500  # the run's latest notifications a closing note is looked for in


class NotifyActivities(WebhookActivities):
    def channels(self, pending: PendingRequest) -> list[str]:
        """The channels ``pending`` is sent on: those configured that its ``notify`` names."""
        configured = (["email"] if self.settings.email_enabled else []) + \
            (["slack"] if self.settings.slack_enabled else [])
        return [c for c in configured if pending.notify is None or c in pending.notify]

    async def _notifications(self, job: Job | RunOwner, event: str, pending: PendingRequest | None,
                             seq: int) -> list[Delivery]:
        """The notifications of event ``seq`` (module docstring): one Delivery per person and
        channel."""
        if event not in TOLD or pending is None or not (channels := self.channels(pending)):
            return []
        refs = await self.store.request_approvers(job.job_id, pending.request_id) or pending.approver_refs
        if event == "human_input_escalated":
            original = job.pending.approver_refs if job.pending is not None else []
            people = await self.access.people(refs) - await self.access.people(original or [user_ref(job.user_id)])
        else:
            people = await self.access.people(refs) if refs else {job.user_id}
            if refs and not pending.allow_self_approval:
                people.discard(job.user_id)
            if event == "human_input_reminder":
                people -= {v.user for v in await self.access.votes(job.job_id, pending.request_id)}
        people = await self._not_muting(job, people)
        out = []
        for user_id in sorted(people):
            user = await self.store.get_user(user_id)
            for channel in channels:
                if user is not None and user.reach(channel):  # set and verified (docs/channels.md)
                    out.append(Delivery(job_id=job.job_id, seq=seq, channel=channel, user_id=user_id))
        return out

    async def _closing(self, job: Job, request_id: str, written: list[tuple[str, int]],
                       notes: list[Notification] | None = None) -> list[Delivery]:
        """The closing notes of a request's end (``written``: the events of it, (name, seq)):
        one per person and channel that was told of the request (delivered). ``notes``: the
        run's notifications as the decision's write read them (None: read here)."""
        ends = [seq for event, seq in written if event in CLOSING or event in ENDS.values()]
        if not ends:
            return []
        if notes is None:
            notes = await self.store.list_notifications(job.job_id, limit=TOLD_READ)
        told = sorted({(n.user_id, n.channel) for n in notes
                       if n.request_id == request_id and (n.delivered or n.error is None) and n.event in TOLD})
        return [Delivery(job_id=job.job_id, seq=ends[-1], channel=channel, user_id=user_id, request_id=request_id)
                for user_id, channel in told]

    async def _ended_closing(self, job: Job | None, request_id: str | None) -> list[Delivery]:
        """The closing notes of the request ``request_id`` a run waited on when it ended
        otherwise than by an answer (stopped, superseded, its flow or user deleted, the maximum
        suspension): the ``run_cancelled`` / ``run_timed_out`` that ended it closes it."""
        if job is None or request_id is None or (event := ENDS.get(job.status.value)) is None:
            return []
        ended = await self.store.read_events_named(job.job_id, event)
        return await self._closing(job, request_id, [(event, ended[-1].seq)]) if ended else []

    async def _decision_reads(self, job: Job, request: PendingRequest | None) -> DecisionReads:
        """WebhookActivities' and the notifications of the run (the closing notes' people)."""
        reads = await super()._decision_reads(job, request)
        reads.notifications = TOLD_READ if request is not None else 0
        return reads

    async def _decision_deliveries(self, job: Job, request: PendingRequest | None,
                                   written: list[tuple[str, int]], reads: DecisionReads | None = None
                                   ) -> list[Delivery]:
        """The webhook deliveries of a decision's events (WebhookActivities) and its closing notes."""
        out = await super()._decision_deliveries(job, request, written, reads)
        told = reads.told if reads is not None and reads.notifications else None
        return out + (await self._closing(job, request.request_id, written, told) if request is not None else [])

    async def _deliveries(self, job: Job | RunOwner, event: str, request_id: str, pending: PendingRequest | None,
                          seq: int | None = None, *, reads: DecisionReads | None = None) -> list[Delivery]:
        """The webhook deliveries of the event (WebhookActivities) and its notifications.
        ``reads``: the webhooks as the event's own write read them."""
        out = await super()._deliveries(job, event, request_id, pending, seq, reads=reads)
        if event in CLOSING and seq is not None:  # (on_timeout: fail) the request ended at its deadline
            return out + await self._closing(job, request_id, [(event, seq)])
        if event not in TOLD or pending is None or not self.channels(pending):
            return out
        seq = seq if seq is not None else await self._seq_of(job.job_id, event, request_id)
        return out + (await self._notifications(job, event, pending, seq) if seq is not None else [])

    @activity.defn(name="notify_person")
    async def notify_person(self, inp: Delivery) -> None:
        """One notification (retried with backoff by the workflow's policy; every attempt logged).
        Nothing is sent once the request no longer waits (but its closing note), to a person
        deleted meanwhile or without the contact any more, or on a channel no longer configured."""
        job = await self.store.get_job(inp.job_id)
        events = await self.store.read_events(inp.job_id, after_seq=inp.seq - 1, limit=1)
        user = await self.store.get_user(inp.user_id or "")
        if job is None or not events or user is None:
            return
        event = events[0]
        request_id = str(event.data.get("request_id") or inp.request_id)
        if event.event in CLOSING or event.event in ENDS.values():
            await self._close(job, request_id, inp, event.event, event.seq, event.data)
            return
        if event.event not in TOLD:
            return
        pending = await self.access.current_request(job, request_id)
        if pending is None or not job.waits_for(pending.request_id) or inp.channel not in self.channels(pending):
            return
        if inp.channel == "email" and (address := user.reach("email")):  # verified only
            await self._email(job, pending, user.id, address, event.event, event.seq)
        elif inp.channel == "slack" and (slack_id := user.reach("slack")):
            await self._slack(job, pending, user.id, slack_id, event.event, event.seq)

    async def _once(self, job: Job, request_id: str, seq: int, event: str, channel: str, user_id: str,
                    send: Callable[[], Awaitable[str | None]]) -> None:
        """Send one notification at most once (docs/channels.md, "Once"): claim it in the log,
        send, then record the outcome. A failed send lets the claim go and raises (the workflow's
        retry sends again); a claim an earlier attempt holds (delivered, or its outcome never
        recorded: that attempt is over, Temporal starts the next only then) is not sent again."""
        attempt = activity.info().attempt
        claim, holder = await self.store.claim_notification(job_id=job.job_id, request_id=request_id, seq=seq,
                                                            event=event, channel=channel, user_id=user_id,
                                                            attempt=attempt)
        if claim is None:
            if holder is not None and not holder.delivered:
                log.warning("notification %s of %s seq %s to %s on %s: attempt %s's outcome was not recorded; "
                            "not sent again", holder.id, job.job_id, seq, user_id, channel, holder.attempt)
                await self.store.log_notification(
                    job_id=job.job_id, request_id=request_id, seq=seq, event=event, channel=channel,
                    user_id=user_id, attempt=attempt, delivered=False,
                    error=f"not sent again: attempt {holder.attempt} may have sent it (its outcome was not recorded)")
            return
        try:
            ref = await send()
        except (mail.MailFailed, slack.SlackFailed) as err:
            await self.store.finish_notification(claim.id, delivered=False, error=str(err))
            raise ApplicationError(str(err), type="NOTIFICATION_FAILED") from None
        await self.store.finish_notification(claim.id, delivered=True, error=None, ref=ref)

    async def _names(self, job: Job) -> tuple[str, str]:
        flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        owner = await self.store.get_user(job.user_id)
        return (flow.name if flow else job.flow_id), (owner.name if owner else job.user_id)

    async def _close(self, job: Job, request_id: str, inp: Delivery, event: str, seq: int,
                     data: dict[str, object]) -> None:
        """The closing note of ``request_id`` to ``inp.user_id`` on ``inp.channel``."""
        user = await self.store.get_user(inp.user_id or "")
        if user is None:
            return
        decider = str(data.get("decided_by") or "")
        if event == "run_cancelled" and data.get("reason") == "stopped":
            decider = job.user_id  # the owner stopped it: no mail telling them so (their Slack message is updated)
        who = await self.store.get_user(decider) if decider else None
        word = "answered"
        if event == "run_cancelled":
            word, outcome = "closed", {
                "stopped": "The run was stopped by its owner.",
                "superseded": "A newer run of the same conversation took its place.",
                "flow_deleted": "Its flow was deleted.", "user_deleted": "Its owner was removed.",
            }.get(str(data.get("reason")), "The run was cancelled.")
        elif event == "run_timed_out":
            word, outcome = "closed", "The run waited longer than it may and has ended."
        elif event == "human_input_expired" or data.get("timed_out"):
            outcome = f"It reached its deadline{': ' + str(data.get('action_id')) if data.get('action_id') else ''}."
        else:
            outcome = f"{data.get('action_id')} by {who.name if who else decider or 'someone'}."
        flow_name, owner_name = await self._names(job)
        address = user.reach("email")  # (an address changed since the request was mailed is pending)
        if inp.channel == "email" and address and self.settings.email_enabled and user.id != decider:
            assert self.settings.smtp_url is not None and self.settings.smtp_from is not None
            msg = mail.closing(flow_name=flow_name, owner_name=owner_name, outcome=outcome,
                               sender=self.settings.smtp_from, to=address, now=utcnow(), word=word)
            smtp_url, sender, to = self.settings.smtp_url, self.settings.smtp_from, address

            async def send_note() -> None:
                await mail.send(mail.parse_smtp_url(smtp_url), msg, sender=sender, to=to,
                                timeout=self.settings.notify_timeout_seconds)

            await self._once(job, request_id, seq, event, "email", user.id, send_note)
        elif inp.channel == "slack" and self.settings.slack_enabled:
            assert self.settings.slack_bot_token is not None
            refs = {n.ref for n in await self.store.list_notifications(job.job_id, limit=500)
                    if n.request_id == request_id and n.user_id == user.id and n.channel == "slack" and n.ref}
            client = slack.Slack(self.settings.slack_bot_token, self.settings.slack_api_url,
                                 self.settings.notify_timeout_seconds)
            text, blocks = slack.outcome_blocks(flow_name, "", f"{word.capitalize()}: {outcome}")

            async def update() -> None:  # chat.update again is harmless: a retry updates them all
                for ref in sorted(r for r in refs if r):
                    channel, _, ts = ref.partition(" ")
                    await client.call("chat.update", channel=channel, ts=ts, text=text, blocks=blocks)

            if refs:
                await self._once(job, request_id, seq, event, "slack", user.id, update)

    async def _slack(self, job: Job, pending: PendingRequest, user_id: str, slack_id: str, event: str,
                     seq: int) -> None:
        settings = self.settings
        assert settings.slack_bot_token is not None
        needs_page = pending.kind == "tool_approval" or any(
            (pending.fields or {}).get(a) is not None for a in pending.allowed_decisions)
        link = None
        if needs_page:  # a decision with values is made on the link's page (its form)
            now = utcnow()
            token = await links.mint(self.store, job_id=job.job_id, pending=pending, user_id=user_id, channel="slack",
                                     now=now, ttl_seconds=settings.link_ttl_seconds)
            link = links.link_url(settings.link_base_url, token)
        flow_name, owner_name = await self._names(job)
        text, blocks = slack.blocks(slack.SlackAsk(
            flow_name=flow_name, owner_name=owner_name, pending=pending, job_id=job.job_id, user_id=user_id,
            input_text=str(job.request.get("input_value") or ""), link_url=link, kind=TOLD[event]))
        client = slack.Slack(settings.slack_bot_token, settings.slack_api_url, settings.notify_timeout_seconds)

        async def post() -> str | None:
            posted = await client.call("chat.postMessage", channel=slack_id, text=text, blocks=blocks,
                                       unfurl_links=False)
            return f"{posted.get('channel')} {posted.get('ts')}" if posted.get("channel") and posted.get("ts") else None

        await self._once(job, pending.request_id, seq, event, "slack", user_id, post)

    async def _email(self, job: Job, pending: PendingRequest, user_id: str, to: str, event: str, seq: int) -> None:
        settings = self.settings
        assert settings.smtp_url is not None and settings.smtp_from is not None
        now = utcnow()
        token = await links.mint(self.store, job_id=job.job_id, pending=pending, user_id=user_id, channel="email",
                                 now=now, ttl_seconds=settings.link_ttl_seconds)
        base = settings.link_base_url
        flow_name, owner_name = await self._names(job)
        asked = mail.Asked(
            flow_name=flow_name, owner_name=owner_name, pending=pending,
            input_text=str(job.request.get("input_value") or ""), page_url=links.link_url(base, token),
            action_urls=[(o.label, links.link_url(base, token, o.action_id)) for o in pending.options
                         if o.action_id in pending.allowed_decisions],
            expires_at=links.expiry(pending, now, settings.link_ttl_seconds), deadline=deadline(pending),
            kind=TOLD[event])
        msg = mail.message(asked, sender=settings.smtp_from, to=to, now=now)
        smtp_url, sender = settings.smtp_url, settings.smtp_from

        async def send() -> None:
            await mail.send(mail.parse_smtp_url(smtp_url), msg, sender=sender, to=to,
                            timeout=settings.notify_timeout_seconds)

        await self._once(job, pending.request_id, seq, event, "email", user_id, send)
