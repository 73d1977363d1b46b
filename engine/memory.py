"""In-memory CheckpointStore and HistoryStore: the reference implementations, for unit tests
and `signoff run`. They keep the documented semantics of engine/store/base.py."""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from datetime import datetime
from typing import Any

from signoff.engine.models import CheckpointRecord, Message, utcnow
from signoff.engine.store.base import CheckpointStore, HistoryStore, StoreError


class InMemoryCheckpointStore(CheckpointStore):
    def __init__(self) -> None:
        self._records: list[CheckpointRecord] = []
        self._lock = asyncio.Lock()
        self.saves = 0  # how many checkpoints were ever written

    async def save_checkpoint(
        self, run_id: str, data: dict[str, Any], *, job_id: str | None = None, expires_at: datetime | None = None
    ) -> str:
        try:
            stored = json.loads(json.dumps(data, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise StoreError(f"checkpoint data is not JSON: {e}") from None
        async with self._lock:
            rec = CheckpointRecord(
                id=str(uuid.uuid4()), run_id=run_id, job_id=job_id, data=stored, created_at=utcnow(), expires_at=expires_at
            )
            self._records.append(rec)
            self.saves += 1
            return rec.id

    async def load_latest_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        for rec in reversed(self._records):
            if rec.run_id == run_id:
                return rec.model_copy(deep=True)
        return None

    async def load_checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        for rec in self._records:
            if rec.id == checkpoint_id:
                return rec.model_copy(deep=True)
        return None

    async def delete_checkpoints(self, run_id: str) -> int:
        async with self._lock:
            before = len(self._records)
            self._records = [r for r in self._records if r.run_id != run_id]
            return before - len(self._records)

    async def delete_expired_checkpoints(self, now: datetime) -> int:
        async with self._lock:
            before = len(self._records)
            self._records = [r for r in self._records if r.expires_at is None or r.expires_at > now]
            return before - len(self._records)

    def count(self, run_id: str | None = None) -> int:
        return sum(1 for r in self._records if run_id is None or r.run_id == run_id)


class InMemoryHistory(HistoryStore):
    def __init__(self) -> None:
        self._messages: dict[str, Message] = {}  # insertion-ordered by id

    async def add_message(self, message: Message) -> Message:
        """Adding a message whose id is already stored keeps the first (retries are harmless)."""
        existing = self._messages.get(message.id)
        if existing is not None:
            return existing.model_copy(deep=True)
        self._messages[message.id] = message.model_copy(deep=True)
        return message

    async def list_messages(self, session_id: str, *, flow_id: str | None = None) -> list[Message]:
        return [
            m.model_copy(deep=True)
            for m in self._messages.values()
            if m.session_id == session_id and (flow_id is None or m.flow_id == flow_id)
        ]

    async def stamp_card(self, request_id: str, submitted_action: str) -> int:
        n = 0
        for m in self._messages.values():
            if m.kind == "card" and m.card is not None and m.card.get("request_id") == request_id:
                card = copy.deepcopy(m.card)
                card["submitted_action"] = submitted_action
                m.card = card
                n += 1
        return n

    async def supersede_cards(self, job_id: str) -> int:
        n = 0
        for m in self._messages.values():
            if (
                m.job_id == job_id
                and m.kind == "card"
                and m.card is not None
                and "submitted_action" not in m.card
                and not m.card.get("superseded")
            ):
                card = copy.deepcopy(m.card)
                card["superseded"] = True
                m.card = card
                n += 1
        return n
