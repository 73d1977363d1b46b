"""Reaching the person, in memory (DESIGN §14): contacts, decision links (the token's hash only),
the notification log."""

from __future__ import annotations

import uuid
from datetime import datetime

from signoff.engine.models import ContactToken, DecisionLink, Notification, User, utcnow
from signoff.engine.store.base import StoreConflict
from signoff.engine.store.encoding import as_utc
from signoff.engine.store.memory.core import _first
from signoff.engine.store.memory.users import MemoryUsers


class MemoryChannels(MemoryUsers):
    """Part of MemoryStore: contacts, decision links, notifications."""

    async def set_contacts(self, user_id: str, contacts: dict[str, str | None], *,
                           verified: bool) -> User | None:
        for key in contacts:
            if key not in ("email", "slack"):
                raise ValueError(f"unknown contact {key!r}")
        t = self._tables()
        user = t.users.get(user_id)
        if user is None:
            return None
        slack = contacts.get("slack")
        if slack is not None and slack != user.slack:
            for other in t.users.values():
                if other.slack == slack and other.id != user_id:
                    if other.slack_verified:
                        raise StoreConflict("That Slack user id is another signoff user's.")
                    other.slack, other.slack_verified = None, False  # a pending claim holds nothing
        for key, value in contacts.items():
            same = value is not None and value == getattr(user, key)
            flag = value is not None and (verified or (same and getattr(user, f"{key}_verified")))
            setattr(user, key, value)
            setattr(user, f"{key}_verified", flag)
        return user.model_copy()

    async def user_by_slack(self, slack_id: str) -> User | None:
        found = [u for u in self._tables().users.values() if u.slack == slack_id]
        return found[0].model_copy() if found else None

    async def create_contact_token(self, token: ContactToken, *, since: datetime, max_per_user: int,
                                   max_per_address: int) -> bool:
        t = self._tables()
        since = as_utc(since)
        recent = [c for c in t.contact_tokens.values() if c.created_at > since]
        if sum(c.user_id == token.user_id for c in recent) >= max_per_user or \
                sum(c.address == token.address for c in recent) >= max_per_address:
            return False
        if token.token_hash in t.contact_tokens:
            raise ValueError("a verification with that token hash exists")
        t.contact_tokens[token.token_hash] = token.model_copy(
            update={"used_at": None, "attempts": 0, "delivered": False, "error": None})
        return True

    async def get_contact_token(self, token_hash: str) -> ContactToken | None:
        token = self._tables().contact_tokens.get(token_hash)
        return token.model_copy() if token is not None else None

    async def last_contact_token(self, user_id: str, channel: str) -> ContactToken | None:
        mine = [t for t in self._tables().contact_tokens.values() if t.user_id == user_id and t.channel == channel]
        return max(mine, key=lambda t: (t.created_at, [-ord(c) for c in t.token_hash])).model_copy() if mine else None

    async def use_contact_token(self, token_hash: str, now: datetime) -> User | None:
        t = self._tables()
        token = t.contact_tokens.get(token_hash)
        now = as_utc(now)
        if token is None or token.used_at is not None or token.expires_at <= now:
            return None
        user = t.users.get(token.user_id)
        if user is None or getattr(user, token.channel, None) != token.address:
            return None
        token.used_at = now
        setattr(user, f"{token.channel}_verified", True)
        return user.model_copy()

    async def finish_contact_token(self, token_hash: str, *, attempts: int, delivered: bool,
                                   error: str | None) -> None:
        token = self._tables().contact_tokens.get(token_hash)
        if token is not None:
            token.attempts, token.delivered, token.error = int(attempts), delivered, error

    async def delete_expired_contact_tokens(self, now: datetime) -> int:
        t = self._tables()
        gone = [k for k, token in t.contact_tokens.items() if token.expires_at <= as_utc(now)]
        for k in gone:
            del t.contact_tokens[k]
        return len(gone)

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
