"""Standing approvals (DESIGN §17, docs/agent.md "Standing approvals"): a tool approval's approve
or edit with ``remember`` makes a rule; these routes list, read and revoke them. A rule is its
maker's and its flow owner's to see and revoke; anyone else gets 404."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Response, status
from pydantic import BaseModel

from signoff.api.deps import CurrentUser, StoreDep
from signoff.api.models import error_responses
from signoff.engine.standing import rule_public
from signoff.service import standing

router = APIRouter(prefix="/api/v1/standing-approvals", tags=["standing-approvals"])

RuleId = Annotated[str, Path(min_length=1, max_length=200)]


class StandingApprovalPublic(BaseModel):
    id: str
    maker_id: str
    flow_id: str
    flow_owner_id: str
    tool: str
    scope: Literal["session", "flow"]
    session_id: str | None
    session_user_id: str | None
    job_id: str
    request_id: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    uses: int
    last_used_at: datetime | None
    status: Literal["active", "revoked", "expired"]


def _public(rule: Any) -> StandingApprovalPublic:
    return StandingApprovalPublic(**rule_public(rule))


@router.get("", response_model=list[StandingApprovalPublic], responses=error_responses({}))
async def list_standing_approvals(store: StoreDep, user: CurrentUser) -> list[StandingApprovalPublic]:
    """The standing approvals you made and those on flows you own, newest first (revoked and
    expired ones too)."""
    return [_public(r) for r in await standing.rules_of(store, user)]


@router.get("/{rule_id}", response_model=StandingApprovalPublic,
            responses=error_responses({404: "`STANDING_APPROVAL_NOT_FOUND`", 422: None}))
async def get_standing_approval(rule_id: RuleId, store: StoreDep, user: CurrentUser) -> StandingApprovalPublic:
    """One standing approval (yours, or on a flow you own)."""
    return _public(await standing.visible_rule(store, user, rule_id))


@router.delete("/{rule_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=error_responses({404: "`STANDING_APPROVAL_NOT_FOUND`", 422: None}))
async def revoke_standing_approval(rule_id: RuleId, store: StoreDep, user: CurrentUser) -> Response:
    """Revoke a standing approval (its maker or the flow's owner): the next call it would have
    approved asks a person again, at once. Idempotent."""
    await standing.revoke(store, user, rule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
