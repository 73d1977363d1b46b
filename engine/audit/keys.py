"""The keys that sign receipts (DESIGN §16, docs/audit.md): Ed25519 keys kept in the secret
store (sealed with the deployment's key, engine/secrets.py) under a system owner that no user
can be, one secret per key, ``receipt-key-000001``, ``...-000002``, ...; the highest signs.

- **Made on first use, race-free**: a key is stored with Store.create_secret, which never
  replaces: two workers making the first key at once both sign with whichever was stored.
- **Rotation** (``signoff audit rotate-key``): the next number, made the same way; receipts
  signed from then on carry its ``key_id``; every key is kept, so old receipts still verify.
- A process reads the keys again after ``SIGNOFF_AUDIT_KEY_CACHE_SECONDS``: a rotation made
  elsewhere reaches every worker within that time.
"""

from __future__ import annotations

import base64
import re
import time
from dataclasses import dataclass
from datetime import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from signoff.engine.audit.receipts import ALGORITHM, key_id_of
from signoff.engine.secrets import SecretBox
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store

__all__ = ["AUDIT_OWNER", "ReceiptKeys", "SigningKey"]

AUDIT_OWNER = "signoff:audit"  # not a user id signoff makes (they are uuid hex): nobody's secrets
KEY_NAME = "receipt-key-{n:06d}"
_KEY_NAME = re.compile(r"^receipt-key-(\d{6})$")


@dataclass(frozen=True)
class SigningKey:
    n: int  # its number (the secret's name)
    key_id: str
    private: Ed25519PrivateKey
    public_raw: bytes
    created_at: datetime

    def public(self) -> dict[str, str]:
        """As GET /api/v1/audit/public-key lists it."""
        return {"key_id": self.key_id, "public_key": base64.b64encode(self.public_raw).decode("ascii"),
                "algorithm": ALGORITHM, "created_at": self.created_at.isoformat()}


class ReceiptKeys:
    """The signing keys of one store (module docstring). ``box``: the deployment's SecretBox
    (default: the settings'), made when first needed."""

    def __init__(self, store: Store, settings: Settings, box: SecretBox | None = None) -> None:
        self.store = store
        self.settings = settings
        self._box = box
        self._keys: list[SigningKey] = []
        self._read_at = 0.0

    @property
    def box(self) -> SecretBox:
        if self._box is None:
            self._box = SecretBox.for_settings(self.settings)
        return self._box

    async def keys(self, *, fresh: bool = False) -> list[SigningKey]:
        """Every key, oldest first (none made here)."""
        if fresh or not self._keys or time.monotonic() - self._read_at >= self.settings.audit_key_cache_seconds:
            numbered = []
            for info in await self.store.list_secrets(AUDIT_OWNER):
                m = _KEY_NAME.match(info.name)
                if m is not None:
                    numbered.append((int(m.group(1)), info.name))
            keys = []
            for n, name in sorted(numbered):
                record = await self.store.get_secret(AUDIT_OWNER, name)
                if record is not None:
                    keys.append(self._key(n, self.box.open(record.ciphertext), record.created_at))
            self._keys, self._read_at = keys, time.monotonic()
        return list(self._keys)

    @staticmethod
    def _key(n: int, sealed: str, created_at: datetime) -> SigningKey:
        private = Ed25519PrivateKey.from_private_bytes(base64.b64decode(sealed))
        raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return SigningKey(n, key_id_of(raw), private, raw, created_at)

    async def _make(self, n: int) -> SigningKey:
        """Key number ``n``: made unless it is there (then the one there is kept)."""
        private = Ed25519PrivateKey.generate()
        raw = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        record = await self.store.create_secret(AUDIT_OWNER, KEY_NAME.format(n=n),
                                                self.box.seal(base64.b64encode(raw).decode("ascii")))
        return self._key(n, self.box.open(record.ciphertext), record.created_at)

    async def signing(self) -> SigningKey:
        """The key that signs now: the newest, the first one made when there is none."""
        keys = await self.keys()
        if not keys:
            await self._make(1)
            keys = await self.keys(fresh=True)
        return keys[-1]

    async def rotate(self) -> SigningKey:
        """A new key that signs from now on (every earlier one kept). Of two rotations at once,
        both get the same new key."""
        keys = await self.keys(fresh=True)
        await self._make(keys[-1].n + 1 if keys else 1)
        return (await self.keys(fresh=True))[-1]

    async def public_keys(self) -> list[dict[str, str]]:
        """Every key's public half, oldest first (the first made now if there is none)."""
        await self.signing()
        return [k.public() for k in await self.keys()]
