"""Webhooks and their delivery log, in memory (the secret as opaque bytes: encrypted by the caller)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence

from signoff.engine.models import DeliveryAttempt, utcnow, Webhook, WebhookDelivery, WebhookRecord
from signoff.engine.store.encoding import ciphertext_bytes, delivery_logged, dumps, unique_strings
from signoff.engine.store.memory.core import _first, MemoryCore, _Tables, _Webhook


class MemoryWebhooks(MemoryCore):
    """Part of MemoryStore: webhooks."""

    @staticmethod
    def _webhook(row: _Webhook) -> Webhook:
        return Webhook(id=row.id, owner_id=row.owner_id, url=row.url, events=json.loads(row.events),
                       created_at=row.created_at)

    @staticmethod
    def _webhook_record(row: _Webhook) -> WebhookRecord:
        return WebhookRecord(id=row.id, owner_id=row.owner_id, url=row.url, events=json.loads(row.events),
                             secret_ciphertext=row.secret_ciphertext, created_at=row.created_at)

    @staticmethod
    def _delete_webhook(t: _Tables, webhook_id: str) -> None:
        del t.webhooks[webhook_id]
        for delivery in [d.id for d in t.deliveries.values() if d.webhook_id == webhook_id]:
            del t.deliveries[delivery]

    def _hooks(self, keep: Callable[[_Webhook], bool]) -> list[_Webhook]:
        """Oldest first (created_at, then id), as the SQL backends list them."""
        return sorted((h for h in self._tables().webhooks.values() if keep(h)), key=lambda h: (h.created_at, h.id))

    async def create_webhook(self, owner_id: str, url: str, events: Iterable[str], secret_ciphertext: bytes,
                             *, limit: int | None = None) -> Webhook | None:
        names = dumps(unique_strings(events, "events"))
        secret = ciphertext_bytes(secret_ciphertext)
        t = self._tables()
        if limit is not None and sum(1 for h in t.webhooks.values() if h.owner_id == owner_id) >= limit:
            return None
        row = _Webhook(str(uuid.uuid4()), owner_id, url, names, secret, utcnow())
        t.webhooks[row.id] = row
        return self._webhook(row)

    async def list_webhooks(self, owner_id: str) -> list[Webhook]:
        return [self._webhook(h) for h in self._hooks(lambda h: h.owner_id == owner_id)]

    async def get_webhook(self, webhook_id: str) -> WebhookRecord | None:
        row = self._tables().webhooks.get(webhook_id)
        return self._webhook_record(row) if row is not None else None

    async def delete_webhook(self, owner_id: str, webhook_id: str) -> bool:
        t = self._tables()
        row = t.webhooks.get(webhook_id)
        if row is None or row.owner_id != owner_id:
            return False
        self._delete_webhook(t, webhook_id)
        return True

    async def webhooks_for(self, owner_ids: Iterable[str], event: str) -> list[WebhookRecord]:
        owners = set(unique_strings(owner_ids, "owner_ids"))
        hooks = [self._webhook_record(h) for h in self._hooks(lambda h: h.owner_id in owners)]
        return [h for h in hooks if event in h.events or "*" in h.events]

    async def log_deliveries(self, attempts: Sequence[DeliveryAttempt]) -> list[WebhookDelivery]:
        at = utcnow()
        logged = [delivery_logged(a, at) for a in attempts]
        deliveries = self._tables().deliveries
        for delivery in logged:
            deliveries[delivery.id] = delivery
        return [d.model_copy() for d in logged]

    async def delivered_webhooks(self, job_id: str, seq: int) -> set[str]:
        return {d.webhook_id for d in self._tables().deliveries.values()
                if d.job_id == job_id and d.seq == int(seq) and d.delivered}

    async def list_deliveries(self, webhook_id: str, *, limit: int = 100) -> list[WebhookDelivery]:
        """Newest first: the reverse of the order they were logged."""
        mine = (d for d in reversed(self._tables().deliveries.values()) if d.webhook_id == webhook_id)
        return [d.model_copy() for d in _first(mine, limit)]
