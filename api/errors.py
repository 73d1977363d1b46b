"""The one place where errors become HTTP responses.

Every error body is ``{"detail": {"error", "code", "message", "job_id"?, ...}}``: ``code`` is
machine-readable, ``message`` says what to fix. Engine errors map to statuses by their code.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from signoff.engine.errors import SignoffError, Unavailable  # noqa: F401 - re-exported for the routes

log = logging.getLogger("signoff.api")


class Unauthorized(SignoffError):
    """A valid x-api-key header is required."""

    code = "UNAUTHORIZED"


class InvalidRequest(SignoffError):
    """The request is not valid."""

    code = "INVALID_REQUEST"


class FlowTooLarge(SignoffError):
    """The flow has more nodes than this deployment allows."""

    code = "FLOW_TOO_LARGE"



STATUS_BY_CODE: dict[str, int] = {
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,
    "NOT_AN_APPROVER": 403,
    "NOT_FOUND": 404,
    "FLOW_NOT_FOUND": 404,
    "JOB_NOT_FOUND": 404,
    "USER_NOT_FOUND": 404,
    "GROUP_NOT_FOUND": 404,
    "WEBHOOK_NOT_FOUND": 404,
    "NO_PENDING_REQUEST": 404,
    "SECRET_NOT_FOUND": 404,
    "STANDING_APPROVAL_NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "NOT_RESUMABLE": 409,
    "ALREADY_VOTED": 409,
    "GROUP_EXISTS": 409,
    "WEBHOOK_LIMIT": 409,
    "STORAGE_LIMIT": 409,
    "RUN_NOT_ENDED": 409,
    "CONTACT_TAKEN": 409,
    "STANDING_APPROVAL_LIMIT": 409,
    "BODY_TOO_LARGE": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "INVALID_REQUEST": 422,
    "INVALID_CONTACT": 422,
    "FLOW_INVALID": 422,
    "FLOW_TOO_LARGE": 422,
    "INVALID_DECISION": 422,
    "INVALID_STANDING_APPROVAL": 422,
    "INVALID_VALUES": 422,
    "NESTED_GATE": 422,
    "RUN_BUDGET_EXCEEDED": 422,
    "IDEMPOTENCY_MISMATCH": 422,
    "TOO_MANY_STREAMS": 429,
    "RATE_LIMITED": 429,
    "RUNS_IN_FLIGHT_LIMIT": 429,
    "UNAVAILABLE": 503,
    "STORE_UNAVAILABLE": 503,
}

# A 503 says when to try again: the database or Temporal is back within seconds after a restart.
RETRY_AFTER_SECONDS = 2

_CODE_BY_HTTP_STATUS = {
    400: "INVALID_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "BODY_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "INVALID_REQUEST",
}


SURROGATE_MESSAGE = "must not contain a lone UTF-16 surrogate (\\ud800-\\udfff): it is not text; send valid Unicode"
_UNSHOWABLE = re.compile("[\x00\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with NUL and lone UTF-16 surrogates written as escapes (``\\u0000``, ``\\ud800``):
    neither can be encoded as UTF-8, so neither may reach an answer or a log as it is."""
    if not _UNSHOWABLE.search(text):
        return text
    return _UNSHOWABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def error_body(code: str, message: str, *, error: str | None = None, **extra: Any) -> dict[str, Any]:
    detail: dict[str, Any] = {"error": error or code.replace("_", " ").capitalize(), "code": code,
                              "message": printable(message)}
    detail.update({k: _jsonable(v) for k, v in extra.items() if v is not None})
    return {"detail": detail}


def retry_headers(status: int, details: dict[str, Any]) -> dict[str, str]:
    """``Retry-After`` for an error answer that says when to try again: a 503 (the database or
    Temporal back within seconds), a 429 with ``retry_after`` (RATE_LIMITED, RUNS_IN_FLIGHT_LIMIT: when to
    send again). Every answer that carries an error, JSON or page, takes its header from here."""
    if status == 503:
        return {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if status == 429 and isinstance(details.get("retry_after"), int):
        return {"Retry-After": str(details["retry_after"])}
    return {}


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "ApiKey"} if status == 401 else retry_headers(status, extra)
    return JSONResponse(error_body(code, message, **extra), status_code=status, headers=headers or None)


def _jsonable(value: Any) -> Any:
    """An error detail as JSON an answer can always carry (details are shallow: problems lists)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {printable(str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return printable(str(value))


def error_answer(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The status and body the API answers ``exc`` with, as its handlers do: a SignoffError with
    a status of its own by its code, anything else 500 INTERNAL_ERROR with no details out. For
    an answer that carries several (a batch's items); the handlers below answer one."""
    status = STATUS_BY_CODE.get(exc.code, 500) if isinstance(exc, SignoffError) else 500
    if status == 500 or not isinstance(exc, SignoffError):
        return 500, error_body("INTERNAL_ERROR", "Internal error; see the server log", error="InternalError")
    extra = {k: _jsonable(v) for k, v in exc.details.items()}
    return status, error_body(exc.code, exc.message, error=type(exc).__name__, **extra)


async def _signoff_error(request: Request, exc: SignoffError) -> JSONResponse:
    status = STATUS_BY_CODE.get(exc.code, 500)
    if status == 500:  # not one the API answers on purpose (e.g. the database failed): no details out
        return await _unexpected(request, exc)
    if status > 500:
        log.warning("signoff error %s: %s", exc.code, exc.message)
    extra = {k: _jsonable(v) for k, v in exc.details.items()}
    return error_response(status, exc.code, exc.message, error=type(exc).__name__, **extra)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = []
    for err in exc.errors():
        loc = printable(".".join(str(p) for p in err.get("loc", ())))
        kind, message = err.get("type", ""), err.get("msg", "")
        if kind == "string_unicode":  # pydantic's word for a lone surrogate in a bounded string
            kind, message = "string_surrogate", SURROGATE_MESSAGE
        problems.append({"loc": loc, "message": message, "type": kind})
    summary = "; ".join(f"{p['loc']}: {p['message']}" for p in problems[:5]) or "invalid request"
    return error_response(422, "INVALID_REQUEST", f"Invalid request: {summary}", error="InvalidRequest", problems=problems)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if isinstance(exc.detail, dict) and "code" in exc.detail:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
    if exc.status_code == 400:  # FastAPI could not read the JSON body: a request error like any other
        return error_response(422, "INVALID_REQUEST", _unreadable_body(request, exc.__cause__), error="InvalidRequest")
    code = _CODE_BY_HTTP_STATUS.get(exc.status_code, "HTTP_ERROR")
    message = str(exc.detail) if exc.detail else code
    if exc.status_code == 413:
        limit = request.app.state.settings.max_body_bytes
        message = f"The request body is larger than {limit} bytes"
    return error_response(exc.status_code, code, message)


def _unreadable_body(request: Request, cause: BaseException | None) -> str:
    if isinstance(cause, RecursionError):
        limit = request.app.state.settings.max_json_depth
        return (f"The JSON body nests objects and lists far more than {limit} levels deep; the limit is {limit}"
                " (SIGNOFF_MAX_JSON_DEPTH)")
    if isinstance(cause, UnicodeError):
        return "The body is not UTF-8 JSON"
    if isinstance(cause, ValueError):  # e.g. an integer of more than 4,300 digits
        return f"The JSON body cannot be read: {printable(str(cause))[:300]}"
    return "The body could not be read as JSON"


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "INTERNAL_ERROR", "Internal error; see the server log", error="InternalError")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SignoffError, _signoff_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
