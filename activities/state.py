"""Moving a RunState across the workflow boundary without bloating Temporal history.

A vertex output whose JSON is larger than ``settings.inline_output_bytes`` is written to a store
blob (content-addressed key) and replaced in the state by ``{"$signoff_blob": key}``; a state
that is still large is stored whole as a blob and only its key travels. Loading resolves the
references again, so the engine always sees plain values.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from signoff.activities.types import StateRef
from signoff.engine.context import RunBudget
from signoff.engine.lifecycle import run_blob_prefix
from signoff.engine.run import check_checkpointable
from signoff.engine.state import RunState
from signoff.engine.store.base import Store

BLOB = "$signoff_blob"
# Whole-state budget: beyond it the state itself travels by reference.
STATE_INLINE_FACTOR = 8
STATE_INLINE_MIN = 64 * 1024


class StateCodec:
    def __init__(self, store: Store, inline_output_bytes: int) -> None:
        self.store = store
        self.limit = inline_output_bytes
        self.state_limit = max(inline_output_bytes * STATE_INLINE_FACTOR, STATE_INLINE_MIN)

    async def externalize(self, state: RunState) -> dict[str, Any]:
        """The state as JSON data, large outputs replaced by blob references (blobs written)."""
        data = check_checkpointable(state)
        job = state.job_id or state.run_id
        for vid, outs in data.get("outputs", {}).items():
            for name, value in list(outs.items()):
                raw = json.dumps(value, separators=(",", ":")).encode()
                if len(raw) <= self.limit:
                    continue
                digest = hashlib.sha256(raw).hexdigest()[:32]
                key = f"{run_blob_prefix(job)}out/{digest}"
                await self.store.put_blob(key, raw)
                outs[name] = {BLOB: key}
        return data

    async def internalize(self, data: dict[str, Any]) -> RunState:
        data = json.loads(json.dumps(data))  # never mutate the caller's copy
        for outs in data.get("outputs", {}).values():
            for name, value in list(outs.items()):
                if isinstance(value, dict) and set(value) == {BLOB}:
                    raw = await self.store.get_blob(value[BLOB])
                    if raw is None:
                        raise LookupError(f"the stored output {value[BLOB]} is missing")
                    outs[name] = json.loads(raw)
        return RunState.model_validate(data)

    async def dump(self, state: RunState, step: int, *, budget: RunBudget | None = None
                   ) -> tuple[StateRef, dict[str, Any]]:
        """A reference for the workflow (inline or a blob key) and the externalized data. With
        ``budget`` (the run's), a whole-state blob (one per layer that dials out) counts against the
        run's output bytes: it is what the run stores; over the budget it is not written
        (RunBudgetExceeded), and ``state.spent`` says what the run has spent with it."""
        data = await self.externalize(state)
        raw = json.dumps(data, separators=(",", ":")).encode()
        if len(raw) <= self.state_limit:
            return StateRef(inline=data), data
        if budget is not None:
            budget.spend_bytes(len(raw))
            state.spent = budget.spent()
            data["spent"] = state.spent.model_dump(mode="json")
            raw = json.dumps(data, separators=(",", ":")).encode()
        key = f"{run_blob_prefix(state.job_id or state.run_id)}state/{step}"
        await self.store.put_blob(key, raw)
        return StateRef(blob_key=key), data

    async def load(self, ref: StateRef) -> RunState:
        if ref.inline is not None:
            return await self.internalize(ref.inline)
        if ref.blob_key:
            raw = await self.store.get_blob(ref.blob_key)
            if raw is None:
                raise LookupError(f"the stored run state {ref.blob_key} is missing")
            return await self.internalize(json.loads(raw))
        raise LookupError("empty state reference")
