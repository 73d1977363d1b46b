"""Webhooks in SQL: a user's endpoints for the human_input_* events of their runs, with the
signing secret's ciphertext (opaque bytes, encrypted by the caller) and a delivery log.

The ciphertext is selected by ``get_webhook`` and ``webhooks_for`` alone; ``list_webhooks``
never reads it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from signoff.engine.models import DeliveryAttempt, Webhook, WebhookDelivery, WebhookRecord, utcnow
from signoff.engine.store.encoding import ciphertext_bytes, delivery_logged, unique_strings
from signoff.engine.store.sql.core import SQLCore
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLWebhooks"]


def subscribed(events: list[str], event: str) -> bool:
    """Whether a webhook with ``events`` receives ``event`` (named exactly, or "*")."""
    return event in events or "*" in events


class SQLWebhooks(SQLCore):
    """Part of SQLStore: webhooks and their deliveries."""

    def _webhook(self, row: dict[str, Any]) -> Webhook:
        return Webhook(
            id=row["id"],
            owner_id=row["owner_id"],
            url=row["url"],
            events=self._dec_json(row["events"]),
            created_at=self._dec_dt(row["created_at"]),
        )

    def _webhook_record(self, row: dict[str, Any]) -> WebhookRecord:
        return WebhookRecord(
            id=row["id"],
            owner_id=row["owner_id"],
            url=row["url"],
            events=self._dec_json(row["events"]),
            secret_ciphertext=bytes(row["secret_ciphertext"]),
            created_at=self._dec_dt(row["created_at"]),
        )

    def _delivery(self, row: dict[str, Any]) -> WebhookDelivery:
        return WebhookDelivery(
            id=row["id"],
            webhook_id=row["webhook_id"],
            event=row["event"],
            job_id=row["job_id"],
            seq=int(row["seq"]),
            attempt=int(row["attempt"]),
            status_code=int(row["status_code"]) if row["status_code"] is not None else None,
            error=row["error"],
            delivered=bool(row["delivered"]),
            at=self._dec_dt(row["at"]),
        )

    async def create_webhook(self, owner_id: str, url: str, events: Iterable[str], secret_ciphertext: bytes,
                             *, limit: int | None = None) -> Webhook | None:
        """See Store.create_webhook: with ``limit``, the owner's row is locked first (SQLite's
        write transaction is one at a time already), then the webhooks counted."""
        names = unique_strings(events, "events")
        secret = ciphertext_bytes(secret_ciphertext)
        params = (str(uuid.uuid4()), owner_id, url, self._enc_json(names), secret, self._enc_dt(utcnow()))
        async with self._tx(write=True) as tx:
            if limit is not None:
                await tx.execute(Q.lock_user, (owner_id,))
                count = await tx.fetchone(Q.count_webhooks, (owner_id,))
                if count is not None and int(count["n"]) >= limit:
                    return None
            row = await tx.fetchone(Q.insert_webhook, params)
        assert row is not None
        return self._webhook(row)

    async def list_webhooks(self, owner_id: str) -> list[Webhook]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_webhooks, (owner_id,))
        return [self._webhook(r) for r in rows]

    async def get_webhook(self, webhook_id: str) -> WebhookRecord | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.webhook, (webhook_id,))
        return self._webhook_record(row) if row else None

    async def delete_webhook(self, owner_id: str, webhook_id: str) -> bool:
        """The owner's webhook with its deliveries (another owner's: nothing, False)."""
        async with self._tx(write=True) as tx:
            deleted = await tx.execute(Q.delete_webhook, (webhook_id, owner_id)) > 0
            if deleted:
                await tx.execute(Q.delete_webhook_deliveries, (webhook_id,))
        return deleted

    async def webhooks_for(self, owner_ids: Iterable[str], event: str) -> list[WebhookRecord]:
        """The owners' webhooks are read, then filtered on their events here (a JSON list)."""
        owners = unique_strings(owner_ids, "owner_ids")
        if not owners:
            return []
        sql = Q.webhooks_of_owners.format(owners=", ".join("?" for _ in owners))
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(sql, owners)
        hooks = [self._webhook_record(r) for r in rows]
        return [h for h in hooks if subscribed(h.events, event)]

    async def log_deliveries(self, attempts: Sequence[DeliveryAttempt]) -> list[WebhookDelivery]:
        """See Store.log_deliveries: the rows in one executemany, in one write transaction."""
        at = utcnow()
        logged = [delivery_logged(a, at) for a in attempts]
        if not logged:
            return []
        enc_at = self._enc_dt(at)
        params = [(d.id, d.webhook_id, d.event, d.job_id, d.seq, d.attempt, d.status_code, d.error,
                   1 if d.delivered else 0, enc_at) for d in logged]

        await self._write(lambda tx: tx.executemany(Q.insert_delivery, params))
        return logged

    async def delivered_webhooks(self, job_id: str, seq: int) -> set[str]:
        """See Store.delivered_webhooks: by the index on (job_id, seq)."""
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.delivered_webhooks, (job_id, int(seq)))
        return {r["webhook_id"] for r in rows}

    async def list_deliveries(self, webhook_id: str, *, limit: int = 100) -> list[WebhookDelivery]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_deliveries, (webhook_id, limit))
        return [self._delivery(r) for r in rows]
