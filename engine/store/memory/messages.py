"""Chat history and its cards, in memory."""

from __future__ import annotations

import json

from signoff.engine.models import Message
from signoff.engine.store.encoding import as_utc, dumps, octets
from signoff.engine.store.memory.core import MemoryCore, _Message, _same


class MemoryMessages(MemoryCore):
    """Part of MemoryStore: messages."""

    @staticmethod
    def _message(row: _Message) -> Message:
        card = json.loads(row.card) if row.card is not None else None
        if card is not None:
            if row.submitted_action is not None:
                card["submitted_action"] = row.submitted_action
            if row.stopped:
                card["stopped"] = True
            elif row.superseded:
                card["superseded"] = True
        return Message(
            id=row.id,
            session_id=row.session_id,
            flow_id=row.flow_id,
            job_id=row.job_id,
            sender=row.sender,  # type: ignore[arg-type]  # stored from a Message, so one of its literals
            sender_name=row.sender_name,
            text=row.text,
            kind=row.kind,  # type: ignore[arg-type]
            card=card,
            created_at=row.created_at,
        )

    async def add_message(self, message: Message) -> Message:
        """Store a message; idempotent by ``message.id`` (a retried write returns the stored one).
        A card's ``submitted_action``/``superseded``/``stopped`` are kept apart from it, as in SQL,
        so a card comes back with the stamps it was given or got, never with ``superseded: false``."""
        card = dict(message.card) if message.card is not None else None
        submitted, superseded, stopped = None, False, False
        if card is not None:
            submitted = card.pop("submitted_action", None)
            superseded = bool(card.pop("superseded", False))
            stopped = bool(card.pop("stopped", False))
        body = dumps(card) if card is not None else None
        t = self._tables()
        row = t.messages.get(message.id)
        if row is None:
            row = t.messages[message.id] = _Message(
                id=message.id,
                session_id=message.session_id,
                flow_id=message.flow_id,
                job_id=message.job_id,
                sender=message.sender,
                sender_name=message.sender_name,
                text=message.text,
                kind=message.kind,
                card=body,
                card_request_id=str(card["request_id"]) if card is not None and card.get("request_id") is not None else None,
                submitted_action=submitted,
                superseded=superseded and not stopped,
                created_at=as_utc(message.created_at),
                stopped=stopped,
            )
            self._charge_job(t, message.job_id, octets(message.text) + octets(body))
        return self._message(row)

    async def list_messages(self, session_id: str, *, flow_id: str | None = None) -> list[Message]:
        """By ``created_at``, then in the order they were added."""
        found = [
            r
            for r in self._tables().messages.values()
            if r.session_id == session_id and (flow_id is None or r.flow_id == flow_id)
        ]
        return [self._message(r) for r in sorted(found, key=lambda r: r.created_at)]

    async def stamp_card(self, request_id: str, submitted_action: str) -> int:
        stamped = 0
        for row in self._tables().messages.values():
            if row.kind == "card" and _same(row.card_request_id, request_id):
                row.submitted_action = submitted_action
                stamped += 1
        return stamped

    async def supersede_cards(self, job_id: str, *, stopped: bool = False) -> int:
        """The job's cards that were neither answered nor closed yet."""
        closed = 0
        for row in self._tables().messages.values():
            if (row.kind == "card" and _same(row.job_id, job_id) and row.submitted_action is None
                    and not row.superseded and not row.stopped):
                row.stopped, row.superseded = stopped, not stopped
                closed += 1
        return closed
