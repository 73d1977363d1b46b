"""A person's own contacts (docs/channels.md, "Verified contacts"): set pending, confirmed by a
mail's link or a Slack button (engine/verify.py), re-sent on request within the cap.

Each confirmation is sent in a task of this process (``ContactService.tasks``, at most
MAX_SENDING at once), retried with backoff; one the process did not get to send (it died, or
too many were being sent) is recorded on its row, and the person asks again
(``POST /api/v1/users/me/verify``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from signoff.engine import verify
from signoff.engine.contacts import CONTACTS
from signoff.engine.errors import ContactTaken, InvalidContact, RateLimited, UserNotFound
from signoff.engine.models import User, utcnow
from signoff.engine.store.base import Store, StoreConflict

log = logging.getLogger(__name__)
MAX_SENDING = 64  # confirmations being sent at once by this process


class ContactService:
    def __init__(self, settings: Any, store: Store) -> None:
        self.settings, self.store = settings, store
        self.tasks: set[asyncio.Task[bool]] = set()

    async def set_own(self, user: User, changes: dict[str, str | None]) -> tuple[User, dict[str, str]]:
        """Set ``user``'s own contacts (checked by the caller: engine/contacts.py), each new one
        pending, and send its confirmation; the user, and per contact made pending what became of
        its confirmation (``sent``, ``limited``: the hour's cap, ``unconfigured``: the channel is
        not)."""
        try:
            changed = await self.store.set_contacts(user.id, changes, verified=False)
        except StoreConflict:
            raise ContactTaken(field="slack") from None
        if changed is None:
            raise UserNotFound(f"User {user.id} no longer exists")
        sent: dict[str, str] = {}
        for channel in changes:
            if changed.contact_state(channel) == "pending" and getattr(user, channel) != getattr(changed, channel):
                sent[channel] = await self._start(changed, channel)
        return changed, sent

    async def resend(self, user: User, channel: str) -> str:
        """Send a new confirmation of ``user``'s pending ``channel`` contact: ``sent`` or
        ``unconfigured``; RateLimited past the hour's cap, InvalidContact when there is none
        pending."""
        if channel not in CONTACTS:
            raise InvalidContact(f"Unknown contact {channel!r}: one of {', '.join(CONTACTS)}", field="contact")
        fresh = await self.store.get_user(user.id)
        if fresh is None:
            raise UserNotFound(f"User {user.id} no longer exists")
        if fresh.contact_state(channel) != "pending":
            raise InvalidContact(f"Your {channel} is {'verified already' if getattr(fresh, channel) else 'not set'}; "
                                 "nothing to confirm", field="contact")
        outcome = await self._start(fresh, channel)
        if outcome == "limited":
            raise RateLimited(f"At most {self.settings.verify_max_per_hour} confirmations an hour per user and per "
                              "address (SIGNOFF_VERIFY_MAX_PER_HOUR); try again later", retry_after=600)
        return outcome

    async def _start(self, user: User, channel: str) -> str:
        if channel not in verify.channels_enabled(self.settings):
            return "unconfigured"
        minted = await verify.mint(self.store, user, channel, self.settings, utcnow())
        if minted is None:
            return "limited"
        row, token = minted
        if len(self.tasks) >= MAX_SENDING:
            await self.store.finish_contact_token(row.token_hash, attempts=0, delivered=False,
                                                  error="not sent: signoff was busy; ask for another confirmation")
            return "limited"
        task = asyncio.get_running_loop().create_task(verify.deliver(self.store, self.settings, row, token, user.name),
                                                      name=f"signoff-verify-{user.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return "sent"

    async def drain(self, timeout: float = 30.0) -> None:
        """At shutdown: the confirmations being sent finish (bounded), then the rest are cancelled."""
        if self.tasks:
            _, late = await asyncio.wait(set(self.tasks), timeout=timeout)
            for task in late:
                task.cancel()
