"""Secrets in SQL: named credentials of a user, encrypted by the caller, kept as opaque bytes.

The ciphertext is selected by ``get_secret`` alone; ``list_secrets`` never reads it.
"""

from __future__ import annotations

from typing import Any

from signoff.engine.models import SecretInfo, SecretRecord, utcnow
from signoff.engine.store.encoding import ciphertext_bytes
from signoff.engine.store.sql.core import SQLCore
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLSecrets"]


class SQLSecrets(SQLCore):
    """Part of SQLStore: secrets."""

    def _secret(self, row: dict[str, Any]) -> SecretRecord:
        return SecretRecord(
            owner_id=row["owner_id"],
            name=row["name"],
            ciphertext=bytes(row["ciphertext"]),
            created_at=self._dec_dt(row["created_at"]),
            updated_at=self._dec_dt(row["updated_at"]),
        )

    async def put_secret(self, owner_id: str, name: str, ciphertext: bytes) -> SecretRecord:
        """See Store.put_secret: one upsert, which keeps created_at on a replace."""
        data = ciphertext_bytes(ciphertext)
        now = self._enc_dt(utcnow())
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.upsert_secret, (owner_id, name, data, now, now))
        assert row is not None
        return self._secret(row)

    async def create_secret(self, owner_id: str, name: str, ciphertext: bytes) -> SecretRecord:
        """See Store.create_secret: an insert that does nothing on a conflict, then the row."""
        data = ciphertext_bytes(ciphertext)
        now = self._enc_dt(utcnow())
        async with self._tx(write=True) as tx:
            await tx.execute(Q.insert_secret, (owner_id, name, data, now, now))
            row = await tx.fetchone(Q.secret, (owner_id, name))
        assert row is not None
        return self._secret(row)

    async def get_secret(self, owner_id: str, name: str) -> SecretRecord | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.secret, (owner_id, name))
        return self._secret(row) if row else None

    async def list_secrets(self, owner_id: str) -> list[SecretInfo]:
        """Sorted here, by code point: ORDER BY would follow the database's collation, which on
        PostgreSQL may be a locale's (``a`` before ``B``) where SQLite compares bytes."""
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_secrets, (owner_id,))
        infos = [
            SecretInfo(
                owner_id=r["owner_id"],
                name=r["name"],
                created_at=self._dec_dt(r["created_at"]),
                updated_at=self._dec_dt(r["updated_at"]),
            )
            for r in rows
        ]
        return sorted(infos, key=lambda s: s.name)

    async def delete_secret(self, owner_id: str, name: str) -> bool:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_secret, (owner_id, name)) > 0
