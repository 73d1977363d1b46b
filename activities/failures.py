"""The one place where signoff's errors cross Temporal's boundary, both ways.

- :func:`to_failure`: a :class:`SignoffError` raised in an activity (or refused by the
  workflow's Update validator) becomes an ``ApplicationError`` whose ``type`` is the error's
  code. An error that retrying cannot fix is non-retryable; a retryable one (a component's
  transient failure, the database) keeps its code with ``_RETRYABLE`` appended and is retried
  by the activity's policy, a bounded number of times (docs/temporal.md).
- :func:`from_failure`: what a client gets back (a failed Update) becomes the SignoffError of
  that code again, so the HTTP API answers it as if it had been raised in the API process.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError

from signoff.engine.errors import FlowInvalid, NotResumable, SignoffError, error_class

RETRYABLE_SUFFIX = "_RETRYABLE"
CARRIED = ("problems", "allowed_decisions")  # what a refusal's answer keeps of its details


def to_failure(err: SignoffError) -> ApplicationError:
    """``err`` as the ApplicationError an activity raises (details: error, type, vertex_id)."""
    vertex_id = getattr(err, "vertex_id", None) or err.details.get("vertex_id")
    if vertex_id is None and isinstance(err, FlowInvalid):
        vertex_id = next((p.get("node") for p in err.problems if isinstance(p, dict) and p.get("node")), None)
    details = {"error": err.message, "type": err.__class__.__name__, "code": err.code, "vertex_id": vertex_id}
    retryable = err.retryable
    return ApplicationError(err.message, details, type=err.code + (RETRYABLE_SUFFIX if retryable else ""),
                            non_retryable=not retryable)


def refused(err: SignoffError) -> dict[str, Any]:
    """A refusal as data (an activity's answer, e.g. ResumeRunOutput.refused), for
    :func:`refusal_of` to raise where it is answered."""
    return {"code": err.code, "message": err.message, "details": {k: v for k, v in err.details.items() if k in CARRIED}}


def refusal_of(data: dict[str, Any]) -> ApplicationError:
    """The refusal :func:`refused` described, as :func:`refusal` makes it."""
    return refusal(error_class(str(data.get("code")), NotResumable).restore(str(data.get("message") or ""),
                                                                           dict(data.get("details") or {})))


def refusal(err: SignoffError) -> ApplicationError:
    """``err`` as a refusal of the workflow's ``resume`` Update (validator or handler): never
    retried, the code as its type, its details (e.g. INVALID_VALUES' problems) kept."""
    details = {k: v for k, v in err.details.items() if k in CARRIED}
    return ApplicationError(err.message, *([details] if details else []), type=err.code, non_retryable=True)


def _application_error(err: BaseException) -> ApplicationError | None:
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return cause


def failure_code(err: BaseException) -> str | None:
    """The code of the first ApplicationError in a Temporal failure's causes, as raised (before
    ``from_failure`` maps an unexpected one to NOT_RESUMABLE), or None when there is none."""
    cause = _application_error(err)
    return None if cause is None else (cause.type or "").removesuffix(RETRYABLE_SUFFIX)


def from_failure(err: BaseException, expected: tuple[type[SignoffError], ...], **details: Any) -> SignoffError:
    """The SignoffError a Temporal failure stands for: the first ApplicationError in its causes,
    when its code is one of the ``expected`` errors' (a refusal the caller answers as such, e.g.
    a decision's NOT_RESUMABLE, INVALID_DECISION); anything else (an infrastructure failure, an
    unknown code, no ApplicationError) is NOT_RESUMABLE: the decision was not applied."""
    cause = _application_error(err)
    if cause is not None:
        cls = error_class(failure_code(cause) or "", NotResumable)
        if not issubclass(cls, expected):
            return NotResumable(cause.message, **details)
        first = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
        carried = {k: v for k, v in first.items() if k in CARRIED}
        return cls.restore(cause.message, {**carried, **details})
    return NotResumable(str(err), **details)


def failure_error(err: BaseException) -> dict[str, Any]:
    """The job's ``error`` (and ``run_failed`` data) for an activity that failed for good:
    ``{error, type, code, vertex_id}`` from the failure's details when signoff raised it."""
    cause = getattr(err, "cause", None) or err
    error: dict[str, Any] = {"error": str(cause), "type": "ActivityError"}
    if isinstance(cause, ApplicationError):
        error["type"] = cause.type or "ApplicationError"
        if cause.details and isinstance(cause.details[0], dict):
            error.update({k: v for k, v in cause.details[0].items() if k in ("vertex_id", "type", "code", "error")})
    return error
