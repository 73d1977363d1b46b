"""A session's chat history in SQL, with the stamps of gate cards in their own columns."""

from __future__ import annotations

from typing import Any

from signoff.engine.models import Message
from signoff.engine.store.encoding import octets
from signoff.engine.store.sql.core import SQLCore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["CARD_STOPPED", "SQLMessages"]

CARD_STOPPED = 2  # the ``superseded`` column of a card closed by a stop (1: superseded by a new run)


class SQLMessages(SQLCore):
    """Part of SQLStore: chat history."""

    def _message(self, row: dict[str, Any]) -> Message:
        card = self._dec_json(row["card"]) if row["card"] is not None else None
        if card is not None:
            if row["submitted_action"] is not None:
                card["submitted_action"] = row["submitted_action"]
            if row["superseded"] == CARD_STOPPED:
                card["stopped"] = True
            elif row["superseded"]:
                card["superseded"] = True
        return Message(
            id=row["id"],
            session_id=row["session_id"],
            flow_id=row["flow_id"],
            job_id=row["job_id"],
            sender=row["sender"],
            sender_name=row["sender_name"],
            text=row["text"],
            kind=row["kind"],
            card=card,
            created_at=self._dec_dt(row["created_at"]),
        )

    async def add_message(self, message: Message) -> Message:
        """Store a message; idempotent by ``message.id`` (a retried write returns the stored one).
        A card's ``submitted_action``/``superseded``/``stopped`` live in their own columns so the
        stamps are plain UPDATEs (``superseded`` holds both closings: 1 superseded, 2 stopped,
        CARD_STOPPED); they are merged back into ``card`` on read."""

        async def write(tx: Tx) -> dict[str, Any] | None:
            row, size = await self._insert_message(tx, message)
            if row is not None:  # a run's message counts to the job's user (text and card)
                await self._charge_job(tx, message.job_id, size)
            else:
                row = await tx.fetchone(Q.message_by_id, (message.id,))
            return row

        row = await self._write(write)
        assert row is not None
        return self._message(row)

    async def _insert_message(self, tx: Any, message: Message) -> tuple[dict[str, Any] | None, int]:
        """The message's row inserted in ``tx`` (None: one with its id is there already) and the
        octets it counts to the job's user (text and card), not charged here."""
        card = dict(message.card) if message.card is not None else None
        submitted, closed = None, 0
        if card is not None:
            submitted = card.pop("submitted_action", None)
            closed = 1 if card.pop("superseded", False) else 0
            closed = CARD_STOPPED if card.pop("stopped", False) else closed
        body = self._enc_json(card) if card is not None else None
        params = (
            message.id,
            message.session_id,
            message.flow_id,
            message.job_id,
            message.sender,
            message.sender_name,
            message.text,
            message.kind,
            body,
            str(card["request_id"]) if card is not None and card.get("request_id") is not None else None,
            submitted,
            closed,
            self._enc_dt(message.created_at),
        )
        row = await tx.fetchone(Q.insert_message, params)
        return row, (octets(message.text) + self._json_octets(body) if row is not None else 0)

    async def list_messages(self, session_id: str, *, flow_id: str | None = None) -> list[Message]:
        sql, params = Q.list_messages, [session_id]
        if flow_id is not None:
            sql += " AND flow_id = ?"
            params.append(flow_id)
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(sql + " ORDER BY created_at, pos", params)
        return [self._message(r) for r in rows]

    async def stamp_card(self, request_id: str, submitted_action: str) -> int:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.stamp_card, (submitted_action, request_id))

    async def supersede_cards(self, job_id: str, *, stopped: bool = False) -> int:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.supersede_cards, (CARD_STOPPED if stopped else 1, job_id))
