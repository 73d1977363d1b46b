"""Named secrets, in memory (opaque bytes: encrypted by the caller)."""

from __future__ import annotations


from signoff.engine.models import SecretInfo, SecretRecord, utcnow
from signoff.engine.store.encoding import ciphertext_bytes
from signoff.engine.store.memory.core import MemoryCore, _Secret


class MemorySecrets(MemoryCore):
    """Part of MemoryStore: secrets."""

    @staticmethod
    def _secret(owner_id: str, name: str, row: _Secret) -> SecretRecord:
        return SecretRecord(
            owner_id=owner_id, name=name, ciphertext=row.ciphertext, created_at=row.created_at, updated_at=row.updated_at
        )

    async def put_secret(self, owner_id: str, name: str, ciphertext: bytes) -> SecretRecord:
        """Create or replace; a replace keeps created_at (see Store.put_secret)."""
        data = ciphertext_bytes(ciphertext)
        now = utcnow()
        t = self._tables()
        row = t.secrets.get((owner_id, name))
        if row is None:
            row = t.secrets[(owner_id, name)] = _Secret(data, now, now)
        else:
            row.ciphertext, row.updated_at = data, now
        return self._secret(owner_id, name, row)

    async def create_secret(self, owner_id: str, name: str, ciphertext: bytes) -> SecretRecord:
        """See Store.create_secret."""
        data = ciphertext_bytes(ciphertext)
        t = self._tables()
        row = t.secrets.get((owner_id, name))
        if row is None:
            now = utcnow()
            row = t.secrets[(owner_id, name)] = _Secret(data, now, now)
        return self._secret(owner_id, name, row)

    async def get_secret(self, owner_id: str, name: str) -> SecretRecord | None:
        row = self._tables().secrets.get((owner_id, name))
        return self._secret(owner_id, name, row) if row is not None else None

    async def list_secrets(self, owner_id: str) -> list[SecretInfo]:
        """Names and times only, by name (code-point order, as the SQL backends sort them)."""
        mine = sorted((k[1], row) for k, row in self._tables().secrets.items() if k[0] == owner_id)
        return [
            SecretInfo(owner_id=owner_id, name=name, created_at=row.created_at, updated_at=row.updated_at)
            for name, row in mine
        ]

    async def delete_secret(self, owner_id: str, name: str) -> bool:
        return self._tables().secrets.pop((owner_id, name), None) is not None
