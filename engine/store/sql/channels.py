"""Reaching the person in SQL (DESIGN §14): a user's contacts, one-time decision links (the
token's hash only) and the notification log.

A link is used by one conditional UPDATE (not used yet, not expired), so of two POSTs of one
link one wins; the loser changes nothing.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from signoff.engine.models import ContactToken, DecisionLink, Notification, User, utcnow
from signoff.engine.store.base import StoreConflict
from signoff.engine.store.sql.queries import Q
from signoff.engine.store.sql.users import SQLUsers

__all__ = ["SQLChannels"]


class SQLChannels(SQLUsers):
    """Part of SQLStore: contacts (on the users' rows, users.py), decision links, notifications."""

    def _link(self, row: dict[str, Any]) -> DecisionLink:
        return DecisionLink(
            token_hash=row["token_hash"], job_id=row["job_id"], request_id=row["request_id"], user_id=row["user_id"],
            channel=row["channel"], csrf=row["csrf"], created_at=self._dec_dt(row["created_at"]),
            expires_at=self._dec_dt(row["expires_at"]),
            used_at=self._dec_dt(row["used_at"]) if row["used_at"] is not None else None)

    def _notification(self, row: dict[str, Any]) -> Notification:
        return Notification(
            id=row["id"], job_id=row["job_id"], request_id=row["request_id"], seq=int(row["seq"]), event=row["event"],
            channel=row["channel"], user_id=row["user_id"], attempt=int(row["attempt"]),
            delivered=bool(row["delivered"]), error=row["error"], ref=row["ref"], at=self._dec_dt(row["at"]))

    def _contact_token(self, row: dict[str, Any]) -> ContactToken:
        return ContactToken(
            token_hash=row["token_hash"], user_id=row["user_id"], channel=row["channel"], address=row["address"],
            csrf=row["csrf"], created_at=self._dec_dt(row["created_at"]), expires_at=self._dec_dt(row["expires_at"]),
            used_at=self._dec_dt(row["used_at"]) if row["used_at"] is not None else None,
            attempts=int(row["attempts"]), delivered=bool(row["delivered"]), error=row["error"])

    async def set_contacts(self, user_id: str, contacts: dict[str, str | None], *,
                           verified: bool) -> User | None:
        for key in contacts:
            if key not in ("email", "slack"):
                raise ValueError(f"unknown contact {key!r}")
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.user_by_id, (user_id,))
            if row is None:
                return None
            slack = contacts.get("slack")
            if slack is not None and slack != row.get("slack"):
                holder = await tx.fetchone(Q.slack_holder, (slack, user_id))
                if holder is not None:
                    if holder["slack_verified"]:
                        raise StoreConflict("That Slack user id is another signoff user's.")
                    await tx.execute(Q.release_slack, (holder["id"],))  # a pending claim holds nothing
            for key, value in contacts.items():
                sql = Q.set_user_email if key == "email" else Q.set_user_slack
                same = value is not None and value == row.get(key)
                flag = value is not None and (verified or (same and bool(row.get(f"{key}_verified"))))
                await tx.execute(sql, (value, 1 if flag else 0, user_id))  # (two at once: the unique index refuses one)
            row = await tx.fetchone(Q.user_by_id, (user_id,))
        return self._user(row) if row else None

    async def user_by_slack(self, slack_id: str) -> User | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.user_by_slack, (slack_id,))
        return self._user(row) if row else None

    async def create_contact_token(self, token: ContactToken, *, since: datetime, max_per_user: int,
                                   max_per_address: int) -> bool:
        params = (token.token_hash, token.user_id, token.channel, token.address, token.csrf,
                  self._enc_dt(token.created_at), self._enc_dt(token.expires_at))
        async with self._tx(write=True) as tx:
            await self._claim_lock(tx, "contact-user\x1f" + token.user_id)  # (always user, then address)
            await self._claim_lock(tx, "contact\x1f" + token.address)
            mine = await tx.fetchone(Q.contact_tokens_of_user, (token.user_id, self._enc_dt(since)))
            theirs = await tx.fetchone(Q.contact_tokens_to_address, (token.address, self._enc_dt(since)))
            if int(mine["n"]) >= max_per_user or int(theirs["n"]) >= max_per_address:  # type: ignore[index]
                return False
            await tx.execute(Q.insert_contact_token, params)
        return True

    async def get_contact_token(self, token_hash: str) -> ContactToken | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.contact_token, (token_hash,))
        return self._contact_token(row) if row else None

    async def last_contact_token(self, user_id: str, channel: str) -> ContactToken | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.last_contact_token, (user_id, channel))
        return self._contact_token(row) if row else None

    async def use_contact_token(self, token_hash: str, now: datetime) -> User | None:
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.contact_token, (token_hash,))
            if row is None:
                return None
            user = await tx.fetchone(Q.user_by_id, (row["user_id"],))
            if user is None or user.get(row["channel"]) != row["address"]:
                return None  # the contact changed since: the token verifies nothing
            if await tx.fetchone(Q.use_contact_token, (self._enc_dt(now), token_hash, self._enc_dt(now))) is None:
                return None
            sql = Q.verify_user_email if row["channel"] == "email" else Q.verify_user_slack
            await tx.execute(sql, (row["user_id"], row["address"]))
            user = await tx.fetchone(Q.user_by_id, (row["user_id"],))
        return self._user(user) if user else None

    async def finish_contact_token(self, token_hash: str, *, attempts: int, delivered: bool,
                                   error: str | None) -> None:
        async with self._tx(write=True) as tx:
            await tx.execute(Q.finish_contact_token, (int(attempts), 1 if delivered else 0, error, token_hash))

    async def delete_expired_contact_tokens(self, now: datetime) -> int:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_expired_contact_tokens, (self._enc_dt(now),))

    async def create_link(self, link: DecisionLink) -> None:
        params = (link.token_hash, link.job_id, link.request_id, link.user_id, link.channel, link.csrf,
                  self._enc_dt(link.created_at), self._enc_dt(link.expires_at))
        async with self._tx(write=True) as tx:
            await tx.execute(Q.insert_link, params)

    async def get_link(self, token_hash: str) -> DecisionLink | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.link, (token_hash,))
        return self._link(row) if row else None

    async def use_link(self, token_hash: str, now: datetime) -> bool:
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.use_link, (self._enc_dt(now), token_hash, self._enc_dt(now)))
        return row is not None

    async def unuse_link(self, token_hash: str, used_at: datetime) -> bool:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.unuse_link, (token_hash, self._enc_dt(used_at))) > 0

    async def delete_expired_links(self, now: datetime) -> int:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_expired_links, (self._enc_dt(now),))

    async def log_notification(self, *, job_id: str, request_id: str, seq: int, event: str, channel: str,
                               user_id: str, attempt: int, delivered: bool, error: str | None,
                               ref: str | None = None) -> Notification:
        params = (str(uuid.uuid4()), job_id, request_id, int(seq), event, channel, user_id, int(attempt),
                  1 if delivered else 0, error, ref, self._enc_dt(utcnow()))
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_notification, params)
        assert row is not None
        return self._notification(row)

    async def _claim_lock(self, tx: Any, key: str) -> None:
        """Serialise claims of one notification (SQLite: BEGIN IMMEDIATE already does)."""

    async def claim_notification(self, *, job_id: str, request_id: str, seq: int, event: str, channel: str,
                                 user_id: str, attempt: int) -> tuple[Notification | None, Notification | None]:
        key = (job_id, request_id, int(seq), channel, user_id)
        params = (str(uuid.uuid4()), job_id, request_id, int(seq), event, channel, user_id, int(attempt),
                  0, None, None, self._enc_dt(utcnow()))
        async with self._tx(write=True) as tx:
            await self._claim_lock(tx, "\x1f".join(map(str, key)))
            held = await tx.fetchone(Q.notification_holder, key)
            if held is not None:
                return None, self._notification(held)
            row = await tx.fetchone(Q.insert_notification, params)
        assert row is not None
        return self._notification(row), None

    async def finish_notification(self, notification_id: str, *, delivered: bool, error: str | None,
                                  ref: str | None = None) -> None:
        async with self._tx(write=True) as tx:
            await tx.execute(Q.finish_notification, (1 if delivered else 0, error, ref, notification_id))

    async def list_notifications(self, job_id: str, *, limit: int = 100) -> list[Notification]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_notifications, (job_id, limit))
        return [self._notification(r) for r in rows]
