"""One root exception with precise subclasses. Each carries a machine-readable ``code``; the
class docstring is the default message. The API maps codes to HTTP statuses in one place."""

from __future__ import annotations

from typing import Any


class SignoffError(Exception):
    """Something went wrong."""

    code = "INTERNAL_ERROR"
    retryable = False

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details
        super().__init__(self.message)

    @classmethod
    def restore(cls, message: str, details: dict[str, Any]) -> "SignoffError":
        """The error again from its message and details (as they crossed a process boundary)."""
        return cls(message, **details)


class FlowInvalid(SignoffError):
    """The flow is not valid."""

    code = "FLOW_INVALID"

    def __init__(self, problems: list[dict[str, Any]] | list[str], message: str | None = None) -> None:
        self.problems = problems
        super().__init__(message or f"The flow has {len(problems)} problem(s)", problems=problems)

    @classmethod
    def restore(cls, message: str, details: dict[str, Any]) -> "SignoffError":
        return cls(details.get("problems") or [], message)


class FlowNotFound(SignoffError):
    """Flow not found."""

    code = "FLOW_NOT_FOUND"


class JobNotFound(SignoffError):
    """Job not found."""

    code = "JOB_NOT_FOUND"


class UserNotFound(SignoffError):
    """User not found."""

    code = "USER_NOT_FOUND"


class GroupNotFound(SignoffError):
    """Group not found."""

    code = "GROUP_NOT_FOUND"


class NoPendingRequest(SignoffError):
    """The job is not waiting for a decision."""

    code = "NO_PENDING_REQUEST"


class Forbidden(SignoffError):
    """You may not execute this flow."""

    code = "FORBIDDEN"


class InvalidDecision(SignoffError):
    """That action is not one of the allowed decisions."""

    code = "INVALID_DECISION"


class NotResumable(SignoffError):
    """The job is not waiting for this request (stale request id, lost claim, or not suspended)."""

    code = "NOT_RESUMABLE"


class Unavailable(SignoffError):
    """A service signoff depends on is not reachable."""

    code = "UNAVAILABLE"


class NestedGateError(SignoffError):
    """A flow with an approval gate cannot run as a nested flow: move the approval to the parent flow."""

    code = "NESTED_GATE"


class ComponentError(SignoffError):
    """A component failed."""

    code = "COMPONENT_ERROR"

    def __init__(self, message: str | None = None, *, vertex_id: str | None = None, retryable: bool = False, **details: Any) -> None:
        self.vertex_id = vertex_id
        self.retryable = retryable
        super().__init__(message, vertex_id=vertex_id, **details)


class RunBudgetExceeded(SignoffError):
    """The run went over one of its budgets (SIGNOFF_RUN_MAX_OUTPUT_BYTES, SIGNOFF_RUN_MAX_CALLS,
    SIGNOFF_RUN_MAX_TOKENS): the run fails. Not a ComponentError: an Agent does not hand it to its
    model as a tool's failure, and retrying the layer cannot help."""

    code = "RUN_BUDGET_EXCEEDED"

    def __init__(self, message: str | None = None, *, budget: str | None = None, limit: int | None = None,
                 used: int | None = None, vertex_id: str | None = None, **details: Any) -> None:
        self.vertex_id = vertex_id
        if vertex_id is not None:
            details["vertex_id"] = vertex_id
        super().__init__(message, budget=budget, limit=limit, used=used, **details)


class CheckpointError(SignoffError):
    """The checkpoint could not be written."""

    code = "CHECKPOINT_ERROR"


class InvalidValues(SignoffError):
    """The decision's values do not match the request's fields."""

    code = "INVALID_VALUES"

    def __init__(self, problems: list[dict[str, Any]], message: str | None = None, **details: Any) -> None:
        self.problems = problems
        super().__init__(message or "The values do not match the request's fields: "
                         + "; ".join(f"{p['loc']}: {p['message']}" for p in problems[:5]), problems=problems,
                         **details)

    @classmethod
    def restore(cls, message: str, details: dict[str, Any]) -> "SignoffError":
        rest = {k: v for k, v in details.items() if k != "problems"}
        return cls(details.get("problems") or [], message, **rest)


class NotAnApprover(SignoffError):
    """You are not one of the people who may decide this request."""

    code = "NOT_AN_APPROVER"


class WaitingOnOthersLimit(SignoffError):
    """Too many of this user's requests wait on other people (SIGNOFF_MAX_WAITING_FOR_OTHERS)."""

    code = "WAITING_ON_OTHERS_LIMIT"


class AlreadyVoted(SignoffError):
    """You have already voted on this request."""

    code = "ALREADY_VOTED"


class IdempotencyMismatch(SignoffError):
    """This idempotency key was already used with a different request; use a new key for a new
    request (the same key with the same request answers the first job)."""

    code = "IDEMPOTENCY_MISMATCH"


class StorageLimit(SignoffError):
    """You keep as many bytes in signoff as this deployment allows (SIGNOFF_USER_MAX_STORED_BYTES):
    delete flows or ended runs you no longer need, or ask the operator for more."""

    code = "STORAGE_LIMIT"


class RunNotEnded(SignoffError):
    """Only a run that has ended (completed, failed, cancelled, timed out) can be deleted: stop it
    first, then delete it."""

    code = "RUN_NOT_ENDED"


class RunsInFlightLimit(SignoffError):
    """Too many of this user's runs are queued or running (SIGNOFF_USER_MAX_RUNS_IN_FLIGHT); wait
    ``retry_after`` seconds (one may have ended or paused at a gate) and submit again."""

    code = "RUNS_IN_FLIGHT_LIMIT"


class RateLimited(SignoffError):
    """Too many requests; wait ``retry_after`` seconds and send again."""

    code = "RATE_LIMITED"


class InvalidContact(SignoffError):
    """A contact (email address, Slack user id) that signoff cannot use; the message says why."""

    code = "INVALID_CONTACT"


class ContactTaken(SignoffError):
    """That Slack user id is another signoff user's (a Slack id says who pressed a button, so it
    is one user's); ask the operator if it is yours."""

    code = "CONTACT_TAKEN"


def error_class(code: str, default: type[SignoffError] = SignoffError) -> type[SignoffError]:
    """The SignoffError subclass whose ``code`` is ``code`` (``default`` when none is)."""
    stack = [SignoffError]
    while stack:
        cls = stack.pop()
        if cls.code == code:
            return cls
        stack.extend(cls.__subclasses__())
    return default


class InvalidStandingApproval(SignoffError):
    """A decision's ``remember`` (a standing approval, DESIGN §17) that signoff cannot take: only
    an approve or edit of an Agent's tool approval may carry one, with a scope of ``session`` or
    ``flow`` and a ``for`` within SIGNOFF_MAX_STANDING; the message says which."""

    code = "INVALID_STANDING_APPROVAL"


class StandingApprovalLimit(SignoffError):
    """You have as many standing approvals in force as one person may (SIGNOFF_MAX_STANDING_PER_USER);
    revoke one (DELETE /api/v1/standing-approvals/{id}) or let one expire."""

    code = "STANDING_APPROVAL_LIMIT"


class StandingApprovalNotFound(SignoffError):
    """Standing approval not found."""

    code = "STANDING_APPROVAL_NOT_FOUND"
