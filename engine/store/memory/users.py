"""Users and their API keys, in memory (a key kept only as its hash). Deleting a user also
takes what hangs on the user's id, as in SQL."""

from __future__ import annotations

import secrets
import uuid

from signoff.engine.models import User, utcnow
from signoff.engine.store.base import StoreConflict
from signoff.engine.store.encoding import hash_api_key
from signoff.engine.store.memory.core import MemoryCore, _Tables


class MemoryUsers(MemoryCore):
    """Part of MemoryStore: users."""

    @staticmethod
    def _new_user(t: _Tables, name: str) -> User:
        user = User(id=str(uuid.uuid4()), name=name, created_at=utcnow())
        t.users[user.id], t.user_by_name[name] = user, user.id
        return user

    async def create_user(self, name: str) -> User:
        t = self._tables()
        if name in t.user_by_name:
            raise StoreConflict(f"A user named {name!r} already exists.")
        return self._new_user(t, name).model_copy()

    async def get_or_create_user(self, name: str) -> User:
        t = self._tables()
        user_id = t.user_by_name.get(name)
        return (t.users[user_id] if user_id is not None else self._new_user(t, name)).model_copy()

    async def get_user(self, user_id: str) -> User | None:
        user = self._tables().users.get(user_id)
        return user.model_copy() if user is not None else None

    async def get_user_by_name(self, name: str) -> User | None:
        t = self._tables()
        user_id = t.user_by_name.get(name)
        return t.users[user_id].model_copy() if user_id is not None else None

    async def list_users(self, *, limit: int = 1000) -> list[User]:
        return [u.model_copy() for u in sorted(self._tables().users.values(), key=lambda u: u.name)[:limit]]

    async def create_api_key(self, user_id: str, key: str | None = None) -> str:
        """Registering the same key for its own user again is harmless; for another, a conflict."""
        key = key or "sk-" + secrets.token_urlsafe(32)
        key_hash = hash_api_key(key)
        t = self._tables()
        owner = t.api_keys.setdefault(key_hash, user_id)
        if owner != user_id:
            raise StoreConflict("That API key already belongs to another user.")
        return key

    async def user_for_api_key(self, key: str) -> User | None:
        t = self._tables()
        user_id = t.api_keys.get(hash_api_key(key))
        user = t.users.get(user_id) if user_id is not None else None
        return user.model_copy() if user is not None else None

    async def revoke_api_key(self, key: str) -> bool:
        t = self._tables()
        owner = t.api_keys.pop(hash_api_key(key), None)
        if owner is not None:
            self._note_access(t, owner)
        return owner is not None

    @staticmethod
    def _revoke_keys(t: _Tables, user_id: str) -> int:
        doomed = [k for k, owner in t.api_keys.items() if owner == user_id]
        for key_hash in doomed:
            del t.api_keys[key_hash]
        return len(doomed)

    async def revoke_api_keys(self, user_id: str) -> int:
        t = self._tables()
        n = self._revoke_keys(t, user_id)
        if n:
            self._note_access(t, user_id)
        return n

    async def delete_user(self, user_id: str) -> bool:
        """See Store.delete_user: the user, keys, shares to them and of their flows, secrets."""
        t = self._tables()
        user = t.users.pop(user_id, None)
        if user is not None:
            del t.user_by_name[user.name]
        self._revoke_keys(t, user_id)
        owned = {f.id for f in t.flows.values() if f.owner_id == user_id}
        for share in [k for k in t.shares if k[1] == user_id or k[0] in owned]:
            del t.shares[share]
        for secret in [k for k in t.secrets if k[0] == user_id]:
            del t.secrets[secret]
        for group in t.groups.values():
            group.members.discard(user_id)
        for key in [k for k in t.groups if k[0] == user_id]:
            del t.groups[key]
        for hook in [h.id for h in t.webhooks.values() if h.owner_id == user_id]:
            self._delete_webhook(t, hook)
        t.participants = {p for p in t.participants if p[0] != user_id}
        for mute in [k for k in t.mutes if user_id in k]:
            del t.mutes[mute]
        t.stored.pop(user_id, None)
        for token_hash in [k for k, link in t.links.items() if link.user_id == user_id]:
            del t.links[token_hash]
        for token_hash in [k for k, token in t.contact_tokens.items() if token.user_id == user_id]:
            del t.contact_tokens[token_hash]
        t.notifications = [n for n in t.notifications if n.user_id != user_id]
        self._note_access(t, user_id)
        return user is not None
