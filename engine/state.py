"""A run's state and what one layer produces: plain, serialisable data.

:class:`RunState` is the checkpoint body; it round-trips through JSON losslessly. It depends on
nothing but the flow spec and the shared records, so every other engine module (the context,
the components, the steps, tracing) can use it without importing each other.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, Field

from signoff.engine.models import AppliedDecision, PendingRequest
from signoff.engine.spec import FlowSpec, spec_hash

STATE_VERSION = 1


class Spent(BaseModel):
    """What a run has spent of its budgets so far (docs/security.md, "Budgets per run"): output
    bytes, outbound calls, model tokens. Carried in the run's state (the checkpoint) from layer to
    layer and across pauses, so neither a new layer nor a resume starts a fresh budget."""

    output_bytes: int = 0
    calls: int = 0
    tokens: int = 0


class RunState(BaseModel):
    version: int = STATE_VERSION
    run_id: str
    job_id: str | None = None
    flow_id: str | None = None
    user_id: str | None = None
    owner_id: str | None = None  # the flow's owner: its secret references are this owner's secrets
    session_id: str | None = None
    input_value: Any = None
    flow: dict[str, Any]
    flow_hash: str  # the graph cache's key
    outputs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    built: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    stopped: dict[str, list[str]] = Field(default_factory=dict)
    dead: list[str] = Field(default_factory=list)
    decisions: list[AppliedDecision] = Field(default_factory=list)
    decision_vertex: dict[str, str] = Field(default_factory=dict)  # request_id -> vertex id
    injected: dict[str, str] = Field(default_factory=dict)  # vertex -> request_id awaiting its rebuild
    pending: PendingRequest | None = None
    pending_vertex: str | None = None
    component_state: dict[str, dict[str, Any]] = Field(default_factory=dict)
    build_counts: dict[str, int] = Field(default_factory=dict)  # builds that completed or paused
    layers: int = 0
    nested_runs: int = 0  # nested runs started so far (Run Flow, any depth), against SIGNOFF_MAX_NESTED_RUNS
    spent: Spent = Field(default_factory=Spent)  # of the run's budgets (SIGNOFF_RUN_MAX_*), nested runs included

    @property
    def paused(self) -> bool:
        return self.pending is not None


class VertexResult(BaseModel):
    vertex_id: str
    component_type: str
    outputs: dict[str, Any] = Field(default_factory=dict)
    stopped: list[str] = Field(default_factory=list)
    state: dict[str, Any] | None = None
    pause: PendingRequest | None = None
    skipped: bool = False


class LayerResult(BaseModel):
    vertex_ids: list[str]
    results: dict[str, VertexResult] = Field(default_factory=dict)
    pause_vertex: str | None = None  # the vertex whose pause the run takes (at most one)
    nested_runs: int | None = None  # the run's nested runs after this layer (None: unchanged)
    spent: Spent | None = None  # what the run has spent after this layer (None: unchanged)

    @property
    def pause(self) -> PendingRequest | None:
        if self.pause_vertex is None:
            return None
        return self.results[self.pause_vertex].pause


def new_run_state(
    spec: FlowSpec,
    *,
    run_id: str | None = None,
    job_id: str | None = None,
    flow_id: str | None = None,
    user_id: str | None = None,
    owner_id: str | None = None,
    session_id: str | None = None,
    input_value: Any = None,
) -> RunState:
    data = spec.to_dict()
    return RunState(
        run_id=run_id or str(uuid.uuid4()),
        job_id=job_id,
        flow_id=flow_id,
        user_id=user_id,
        owner_id=owner_id,
        session_id=session_id,
        input_value=input_value,
        flow=data,
        flow_hash=spec_hash(data),
    )
