"""Reaching the person, in memory (DESIGN §14): contacts, decision links (the token's hash only),
the notification log."""

from __future__ import annotations

import uuid
from datetime import datetime

from signoff.engine.models import DecisionLink, Notification, User, utcnow
from signoff.engine.store.base import StoreConflict
from signoff.engine.store.encoding import as_utc
from signoff.engine.store.memory.core import _first
from signoff.engine.store.memory.users import MemoryUsers


class MemoryChannels(MemoryUsers):
    """Part of MemoryStore: contacts, decision links, notifications."""

    async def set_contacts(self, user_id: str, contacts: dict[str, str | None]) -> User | None:
        for key in contacts:
            if key not in ("email", "slack"):
                raise ValueError(f"unknown contact {key!r}")
        t = self._tables()
        user = t.users.get(user_id)
        if user is None:
            return None
        slack = contacts.get("slack")
        if slack is not None and any(u.slack == slack and u.id != user_id for u in t.users.values()):
            raise StoreConflict("That Slack user id is another signoff user's.")
        for key, value in contacts.items():
            setattr(user, key, value)
        return user.model_copy()

    async def user_by_slack(self, slack_id: str) -> User | None:
        found = [u for u in self._tables().users.values() if u.slack == slack_id]
        return found[0].model_copy() if found else None

    async def create_link(self, link: DecisionLink) -> None:
        t = self._tables()
        if link.token_hash in t.links:
            raise ValueError("a link with that token hash exists")
        t.links[link.token_hash] = link.model_copy(update={"used_at": None})

    async def get_link(self, token_hash: str) -> DecisionLink | None:
        link = self._tables().links.get(token_hash)
        return link.model_copy() if link is not None else None

    async def use_link(self, token_hash: str, now: datetime) -> bool:
        link = self._tables().links.get(token_hash)
        now = as_utc(now)
        if link is None or link.used_at is not None or link.expires_at <= now:
            return False
        link.used_at = now
        return True

    async def unuse_link(self, token_hash: str, used_at: datetime) -> bool:
        link = self._tables().links.get(token_hash)
        if link is None or link.used_at != as_utc(used_at):
            return False
        link.used_at = None
        return True

    async def delete_expired_links(self, now: datetime) -> int:
        t = self._tables()
        gone = [k for k, link in t.links.items() if link.expires_at <= as_utc(now)]
        for k in gone:
            del t.links[k]
        return len(gone)

    async def log_notification(self, *, job_id: str, request_id: str, seq: int, event: str, channel: str,
                               user_id: str, attempt: int, delivered: bool, error: str | None,
                               ref: str | None = None) -> Notification:
        row = Notification(id=str(uuid.uuid4()), job_id=job_id, request_id=request_id, seq=int(seq), event=event,
                           channel=channel, user_id=user_id, attempt=int(attempt), delivered=delivered, error=error,
                           ref=ref, at=utcnow())
        self._tables().notifications.append(row)
        return row.model_copy()

    async def claim_notification(self, *, job_id: str, request_id: str, seq: int, event: str, channel: str,
                                 user_id: str, attempt: int) -> tuple[Notification | None, Notification | None]:
        for n in self._tables().notifications:
            if (n.job_id, n.request_id, n.seq, n.channel, n.user_id) == (job_id, request_id, int(seq), channel,
                                                                         user_id) and (n.delivered or n.error is None):
                return None, n.model_copy()
        return await self.log_notification(job_id=job_id, request_id=request_id, seq=seq, event=event,
                                           channel=channel, user_id=user_id, attempt=attempt, delivered=False,
                                           error=None), None

    async def finish_notification(self, notification_id: str, *, delivered: bool, error: str | None,
                                  ref: str | None = None) -> None:
        for n in self._tables().notifications:
            if n.id == notification_id:
                n.delivered, n.error, n.ref = delivered, error, ref

    async def list_notifications(self, job_id: str, *, limit: int = 100) -> list[Notification]:
        mine = (n.model_copy() for n in reversed(self._tables().notifications) if n.job_id == job_id)
        return _first(mine, limit)
