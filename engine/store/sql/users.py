"""Users and their API keys, in SQL. A key is stored only as its hash (encoding.hash_api_key).
Deleting a user also takes what hangs on the user's id: keys, shares, secrets, group
memberships, the groups the user owns, the user's webhooks, the mutes by and of the user, and the
decision links and notifications sent to the user."""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from signoff.engine.models import User, utcnow
from signoff.engine.store.base import StoreConflict
from signoff.engine.store.encoding import hash_api_key
from signoff.engine.store.sql.core import SQLCore
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLUsers"]


class SQLUsers(SQLCore):
    """Part of SQLStore: users and API keys."""

    def _user(self, row: dict[str, Any]) -> User:
        return User(id=row["id"], name=row["name"], created_at=self._dec_dt(row["created_at"]),
                    email=row.get("email"), slack=row.get("slack"),
                    email_verified=bool(row.get("email_verified")), slack_verified=bool(row.get("slack_verified")))

    async def create_user(self, name: str) -> User:
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_user, (str(uuid.uuid4()), name, self._enc_dt(utcnow())))
        if row is None:
            raise StoreConflict(f"A user named {name!r} already exists.")
        return self._user(row)

    async def get_or_create_user(self, name: str) -> User:
        """The user with that name, created when missing (safe under concurrent callers)."""
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_user, (str(uuid.uuid4()), name, self._enc_dt(utcnow())))
            if row is None:
                row = await tx.fetchone(Q.user_by_name, (name,))
        assert row is not None
        return self._user(row)

    async def get_user(self, user_id: str) -> User | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.user_by_id, (user_id,))
        return self._user(row) if row else None

    async def get_user_by_name(self, name: str) -> User | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.user_by_name, (name,))
        return self._user(row) if row else None

    async def list_users(self, *, limit: int = 1000) -> list[User]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_users, (limit,))
        return [self._user(r) for r in rows]

    async def create_api_key(self, user_id: str, key: str | None = None) -> str:
        key = key or "sk-" + secrets.token_urlsafe(32)
        key_hash = hash_api_key(key)
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_api_key, (key_hash, user_id, self._enc_dt(utcnow())))
            if row is None:
                owner = await tx.fetchone(Q.api_key_owner, (key_hash,))
                if owner is None or owner["user_id"] != user_id:
                    raise StoreConflict("That API key already belongs to another user.")
        return key

    async def user_for_api_key(self, key: str) -> User | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.user_for_api_key, (hash_api_key(key),))
        return self._user(row) if row else None

    async def revoke_api_key(self, key: str) -> bool:
        key_hash = hash_api_key(key)
        async with self._tx(write=True) as tx:
            owner = await tx.fetchone(Q.api_key_owner, (key_hash,))
            gone = await tx.execute(Q.delete_api_key, (key_hash,)) > 0
            if gone and owner is not None:
                await self._note_access(tx, owner["user_id"])
            return gone

    async def revoke_api_keys(self, user_id: str) -> int:
        async with self._tx(write=True) as tx:
            n = await tx.execute(Q.delete_user_api_keys, (user_id,))
            if n:
                await self._note_access(tx, user_id)
            return n

    async def delete_user(self, user_id: str) -> bool:
        """See Store.delete_user: one transaction; flows and jobs are left to the caller."""
        async with self._tx(write=True) as tx:
            existed = await tx.execute(Q.delete_user, (user_id,)) > 0
            await tx.execute(Q.delete_user_api_keys, (user_id,))
            await tx.execute(Q.delete_shares_to_user, (user_id,))
            await tx.execute(Q.delete_shares_of_owner, (user_id,))
            await tx.execute(Q.delete_owner_secrets, (user_id,))
            await tx.execute(Q.delete_user_memberships, (user_id,))
            await tx.execute(Q.delete_owner_groups, (user_id,))  # the group rows first (groups.py)
            await tx.execute(Q.delete_owner_group_members, (user_id,))
            await tx.execute(Q.delete_owner_webhook_deliveries, (user_id,))
            await tx.execute(Q.delete_owner_webhooks, (user_id,))
            await tx.execute(Q.delete_user_participation, (user_id,))
            await tx.execute(Q.delete_user_mutes, (user_id, user_id))
            await tx.execute(Q.delete_user_storage, (user_id,))
            await tx.execute(Q.delete_user_links, (user_id,))
            await tx.execute(Q.delete_user_contact_tokens, (user_id,))
            await tx.execute(Q.delete_user_notifications, (user_id,))
            await self._note_access(tx, user_id)
        return existed
