"""Telling people about a request where they are (DESIGN §14): who is told on which channel
(``_notifications``, beside the webhooks of the same event), and the sending of one
notification to one person (``notify_person``, retried by the workflow's policy, every attempt
in the run's notification log).

Who: the request's approvers (groups expanded; with none named, the run's owner), but the owner
when ``allow_self_approval`` is false, anyone who muted the owner, and at a reminder anyone who
voted already; at an escalation only the people it added. Which channels: the Human Input's
``notify`` (default every channel the operator configured), to the people with that contact.
A notification is sent only while the request still waits: one that comes after the decision
sends nothing.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from signoff.activities.types import Delivery
from signoff.activities.webhooks import WebhookActivities
from signoff.engine import links, mail, slack
from signoff.engine.decisions import deadline, user_ref
from signoff.engine.models import Job, PendingRequest, utcnow

# the events a person is told of, and what the mail calls each
TOLD = {"human_input_required": "required", "human_input_reminder": "reminder", "human_input_escalated": "escalated"}


class NotifyActivities(WebhookActivities):
    def channels(self, pending: PendingRequest) -> list[str]:
        """The channels ``pending`` is sent on: those configured that its ``notify`` names."""
        configured = (["email"] if self.settings.email_enabled else []) + \
            (["slack"] if self.settings.slack_enabled else [])
        return [c for c in configured if pending.notify is None or c in pending.notify]

    async def _notifications(self, job: Job, event: str, pending: PendingRequest | None,
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
                if user is not None and getattr(user, channel, None):
                    out.append(Delivery(job_id=job.job_id, seq=seq, channel=channel, user_id=user_id))
        return out

    async def _deliveries(self, job: Job, event: str, request_id: str, pending: PendingRequest | None,
                          seq: int | None = None) -> list[Delivery]:
        """The webhook deliveries of the event (WebhookActivities) and its notifications."""
        out = await super()._deliveries(job, event, request_id, pending, seq)
        if event not in TOLD or pending is None or not self.channels(pending):
            return out
        seq = seq if seq is not None else await self._seq_of(job.job_id, event, request_id)
        return out + (await self._notifications(job, event, pending, seq) if seq is not None else [])

    @activity.defn(name="notify_person")
    async def notify_person(self, inp: Delivery) -> None:
        """One notification (retried with backoff by the workflow's policy; every attempt logged).
        Nothing is sent once the request no longer waits, to a person deleted meanwhile or
        without the contact any more, or on a channel no longer configured."""
        job = await self.store.get_job(inp.job_id)
        events = await self.store.read_events(inp.job_id, after_seq=inp.seq - 1, limit=1)
        user = await self.store.get_user(inp.user_id or "")
        if job is None or not events or user is None or events[0].event not in TOLD:
            return
        event = events[0]
        pending = await self.access.current_request(job, str(event.data.get("request_id")))
        if pending is None or not job.waits_for(pending.request_id) or inp.channel not in self.channels(pending):
            return
        if inp.channel == "email" and user.email:
            await self._email(job, pending, user.id, user.email, event.event, event.seq)
        elif inp.channel == "slack" and user.slack:
            await self._slack(job, pending, user.id, user.slack, event.event, event.seq)

    async def _sent(self, job: Job, seq: int, event: str, channel: str, user_id: str, error: str | None) -> None:
        """Log the attempt; a failed one raises, for the workflow's retry policy."""
        await self.store.log_notification(job_id=job.job_id, seq=seq, event=event, channel=channel, user_id=user_id,
                                          attempt=activity.info().attempt, delivered=error is None, error=error)
        if error is not None:
            raise ApplicationError(error, type="NOTIFICATION_FAILED")

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
        flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        owner = await self.store.get_user(job.user_id)
        text, blocks = slack.blocks(slack.SlackAsk(
            flow_name=flow.name if flow else job.flow_id, owner_name=owner.name if owner else job.user_id,
            pending=pending, job_id=job.job_id, user_id=user_id, input_text=str(job.request.get("input_value") or ""), link_url=link,
            kind=TOLD[event]))
        client = slack.Slack(settings.slack_bot_token, settings.slack_api_url, settings.notify_timeout_seconds)
        try:
            await client.call("chat.postMessage", channel=slack_id, text=text, blocks=blocks, unfurl_links=False)
        except slack.SlackFailed as err:
            await self._sent(job, seq, event, "slack", user_id, str(err))
        await self._sent(job, seq, event, "slack", user_id, None)

    async def _email(self, job: Job, pending: PendingRequest, user_id: str, to: str, event: str, seq: int) -> None:
        settings = self.settings
        assert settings.smtp_url is not None and settings.smtp_from is not None
        now = utcnow()
        token = await links.mint(self.store, job_id=job.job_id, pending=pending, user_id=user_id, channel="email",
                                 now=now, ttl_seconds=settings.link_ttl_seconds)
        base = settings.link_base_url
        flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        owner = await self.store.get_user(job.user_id)
        asked = mail.Asked(
            flow_name=flow.name if flow else job.flow_id, owner_name=owner.name if owner else job.user_id,
            pending=pending, input_text=str(job.request.get("input_value") or ""),
            page_url=links.link_url(base, token),
            action_urls=[(o.label, links.link_url(base, token, o.action_id)) for o in pending.options
                         if o.action_id in pending.allowed_decisions],
            expires_at=links.expiry(pending, now, settings.link_ttl_seconds), deadline=deadline(pending),
            kind=TOLD[event])
        attempt = activity.info().attempt
        try:
            await mail.send(mail.parse_smtp_url(settings.smtp_url),
                            mail.message(asked, sender=settings.smtp_from, to=to, now=now),
                            sender=settings.smtp_from, to=to, timeout=settings.notify_timeout_seconds)
        except mail.MailFailed as err:
            await self.store.log_notification(job_id=job.job_id, seq=seq, event=event, channel="email",
                                              user_id=user_id, attempt=attempt, delivered=False, error=str(err))
            raise ApplicationError(str(err), type="NOTIFICATION_FAILED") from None
        await self.store.log_notification(job_id=job.job_id, seq=seq, event=event, channel="email", user_id=user_id,
                                          attempt=attempt, delivered=True, error=None)
