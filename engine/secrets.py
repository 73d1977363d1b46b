"""Named secrets (DESIGN §13): credentials a user stores once (``signoff secrets set NAME``,
``POST /api/v1/secrets``) and a flow references by name in a param, ``{"$secret": "NAME"}``
(e.g. an HTTP Request header, an Agent's ``api_key``).

- **Encrypted at rest**: the store keeps only the ciphertext (Fernet: AES-128-CBC with an
  HMAC-SHA256, from the well-kept ``cryptography`` package), under the deployment's key
  (``SIGNOFF_SECRET_KEY``; by default a key file in ``SIGNOFF_HOME`` made on first use).
- **Never returned**: the API lists names and dates only; nothing reads a value back out.
- **Revealed late**: a component asks for the value (``ctx.run.reveal(param)``) at the moment
  it dials out, so the value is never in a param, an output, a checkpoint, Temporal history, a
  span, an event or a log line. A reference is resolved against the secrets of the owner of
  the flow that holds it (a nested flow's owner for a nested flow's nodes), never the caller's.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from cryptography.fernet import Fernet, InvalidToken

from signoff.engine.errors import SignoffError
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store

SECRET_REF = "$secret"
MASK = "********"
KEY_FILE = "secret.key"
NAME_MAX_CHARS = 200
VALUE_MAX_BYTES = 64 * 1024


class SecretNotFound(SignoffError):
    """No secret of that name."""

    code = "SECRET_NOT_FOUND"


class SecretKeyError(SignoffError):
    """The secrets key is missing, malformed, or not the one the secrets were sealed with."""

    code = "SECRET_KEY_ERROR"


def is_secret_ref(value: Any) -> bool:
    """``{"$secret": "NAME"}``."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(SECRET_REF), str)


def secret_names(value: Any) -> set[str]:
    """The names of every secret referenced anywhere in ``value``."""
    names: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if is_secret_ref(item):
            names.add(item[SECRET_REF])
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return names


def masked(value: Any) -> Any:
    """A credential-bearing param as others may see it: a literal is masked (each value of an
    object: header names stay readable), a reference shows only the secret's name."""
    if is_secret_ref(value) or value is None:
        return value
    if isinstance(value, dict):
        return {k: masked(v) for k, v in value.items()}
    return MASK


def scrubbed(text: str, values: Iterable[str]) -> str:
    """``text`` with every credential in ``values`` masked, the longest first (an answer or an
    error message that echoes a request's headers must not carry a secret into outputs, events or
    logs). Mask before cutting: :func:`clipped` does both in that order."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def clipped(text: str, values: Iterable[str], limit: int) -> str:
    """``text`` masked (:func:`scrubbed`), then cut to ``limit`` characters: never the other way
    round, which would leave the head of a credential that straddles the cut unmasked."""
    return scrubbed(text, values)[:limit]


# Header values that are never credentials (an echo of them is not masked: masking
# "application/json" everywhere in an answer would only garble it).
NOT_CREDENTIALS = frozenset({"accept", "accept-encoding", "accept-language", "cache-control", "content-type",
                             "content-language", "user-agent", "idempotency-key"})
MIN_CREDENTIAL_CHARS = 4  # shorter literals are masked nowhere: they would garble any text


def _forms(value: str) -> set[str]:
    """A credential and the forms an echo may show it in: ``Bearer X`` also as ``X``, ``Basic B``
    also as the decoded ``user:pass`` and ``pass``."""
    found = {value}
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if token:
        found.add(token)
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(token, validate=True).decode("utf-8")
            except ValueError:
                decoded = ""
            if decoded:
                found.add(decoded)
                found.add(decoded.partition(":")[2])
    return found


def userinfo_credentials(url: Any) -> set[str]:
    """The credentials in a URL's userinfo (``https://user:pass@host``): the user, the password,
    ``user:pass`` (decoded and as written) and its Basic form (httpx sends userinfo as Basic)."""
    if not isinstance(url, str) or "@" not in url:
        return set()
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return set()
    if "@" not in parts.netloc:
        return set()
    raw = parts.netloc.rpartition("@")[0]
    raw_user, _, raw_password = raw.partition(":")
    user, password = unquote(raw_user), unquote(raw_password)
    found = {raw, raw_user, raw_password, user, password, f"{user}:{password}",
             base64.b64encode(f"{user}:{password}".encode()).decode("ascii")}
    return {v for v in found if len(v) >= MIN_CREDENTIAL_CHARS}


def without_userinfo(url: str) -> str:
    """``url`` as a message may show it: its userinfo masked (``https://********@host/``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=f"{MASK}@{parts.netloc.rpartition('@')[2]}"))


def credentials(*, headers: Mapping[str, Any] | None = None, urls: Iterable[Any] = (),
                values: Iterable[str | None] = ()) -> list[str]:
    """Every literal credential of a request, to mask in whatever comes back before it is cut:
    ``values`` (revealed secrets, an API key), each header value (a literal as much as a revealed
    secret; not the few headers that never carry one), and the userinfo of ``urls``."""
    found: set[str] = set()
    for value in values:
        if value:
            found |= _forms(str(value))
    for name, value in (headers or {}).items():
        if value is not None and str(name).lower() not in NOT_CREDENTIALS:
            found |= _forms(str(value))
    for url in urls:
        found |= userinfo_credentials(url)
    return sorted((v for v in found if len(v) >= MIN_CREDENTIAL_CHARS), key=len, reverse=True)


def deployment_key(settings: Settings) -> bytes:
    """The deployment's key: ``settings.secret_key``, else the key file in SIGNOFF_HOME (made with
    mode 0600 on first use: a single-host deployment needs no setup; replicas must share a key).
    It seals stored secrets (:class:`SecretBox`) and is the key material of the MCP server's
    sealed request state (api/mcp/server.py), which another replica must open."""
    if settings.secret_key:
        return settings.secret_key.encode()
    path = Path(settings.home) / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(Fernet.generate_key())
    return path.read_bytes().strip()


class SecretBox:
    """Seals and opens secret values with the deployment's key."""

    def __init__(self, key: str | bytes) -> None:
        try:
            self._fernet = Fernet(key)
        except (ValueError, TypeError) as e:
            raise SecretKeyError(
                f"SIGNOFF_SECRET_KEY is not a valid key ({e}); make one with "
                "`python -c \"from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())\"`"
            ) from None

    @classmethod
    def for_settings(cls, settings: Settings) -> "SecretBox":
        """The box of :func:`deployment_key`."""
        return cls(deployment_key(settings))

    def seal(self, value: str) -> bytes:
        return self._fernet.encrypt(value.encode("utf-8"))

    def open(self, ciphertext: bytes, *, ttl: int | None = None) -> str:
        """``ttl``: refused (SecretKeyError) when sealed more than that many seconds ago."""
        try:
            return self._fernet.decrypt(ciphertext, ttl=ttl).decode("utf-8")
        except InvalidToken:
            raise SecretKeyError(
                "A stored secret cannot be decrypted with this deployment's key (SIGNOFF_SECRET_KEY or "
                "SIGNOFF_HOME/secret.key changed?)"
            ) from None


class Vault:
    """The secrets of every owner in one store, sealed with the deployment's key (made lazily:
    a process that never touches a secret never needs the key)."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._box: SecretBox | None = None

    @property
    def box(self) -> SecretBox:
        if self._box is None:
            self._box = SecretBox.for_settings(self.settings)
        return self._box

    async def value(self, owner_id: str, name: str) -> str | None:
        """The plain value of an owner's secret (what a run's ``reveal`` resolves), or None."""
        record = await self.store.get_secret(owner_id, name)
        return None if record is None else self.box.open(record.ciphertext)

    async def put(self, owner_id: str, name: str, value: str) -> Any:
        """Seal and store (create or replace); returns the stored record's public part."""
        await self.store.put_secret(owner_id, name, self.box.seal(value))
        return next(s for s in await self.store.list_secrets(owner_id) if s.name == name)
