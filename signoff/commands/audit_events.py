"""`signoff audit verify-events --run JOB`: check a run's event log against its hash chain
(docs/audit.md, "The event log's hash chain"), offline: the events and their hashes are read
from ``GET /api/v1/runs/{job_id}/events`` and every hash is computed here again.

Exit 0: the chain holds (events written before the chain are counted and said); 3: a break,
named by the event's seq and what is wrong; 1: the run cannot be read (not found, no access,
the API away).

:func:`verify_run_events` is the check itself, for any command that verifies a run (``signoff
audit verify --run`` calls it beside the receipts' check)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import httpx

from signoff.commands._client import CommandError, add_client_options, check, client, emit, run_handler, seg
from signoff.engine.audit.events import Break, verify_chain

# a page of the events API (its maximum), and the most events one check reads (a bound: a run
# longer than this is refused rather than read without end)
PAGE = 1000
MAX_EVENTS = 2_000_000

EXIT_BROKEN = 3


@dataclass(frozen=True)
class EventsVerification:
    """What :func:`verify_run_events` found for ``job_id``."""

    job_id: str
    events: int  # read
    checked: int  # verified against their hash
    unchained: int  # written before the chain (not verifiable)
    last_seq: int  # the run's counter when the check began
    head: str | None  # the last event's hash
    broken: Break | None

    @property
    def ok(self) -> bool:
        return self.broken is None

    def as_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "ok": self.ok, "events": self.events, "checked": self.checked,
                "unchained": self.unchained, "last_seq": self.last_seq, "head": self.head,
                "break": self.broken.as_dict() if self.broken else None}

    def describe(self) -> str:
        if self.broken is not None:
            return f"run {self.job_id}: the event log is broken at seq {self.broken.seq} ({self.broken.kind}): " \
                   f"{self.broken.message}"
        text = f"run {self.job_id}: {self.checked} events verified"
        if self.unchained:
            text += f"; the first {self.unchained} were written before the chain (not verifiable)"
        if self.head:
            text += f"; chain head {self.head}"
        return text


def verify_run_events(http: httpx.Client, job_id: str, *, max_events: int = MAX_EVENTS) -> EventsVerification:
    """Read the run's events a page at a time through ``http`` (a client with the API's base URL
    and key) and check the chain. Raises CommandError when the run cannot be read."""
    events: list[dict[str, Any]] = []
    after, last_seq = 0, None
    while True:
        page = check(http.get(f"/api/v1/runs/{seg(job_id)}/events", params={"after": after, "limit": PAGE}))
        if last_seq is None:
            last_seq = int(page["last_seq"])  # the counter before the first page: the log reaches it at least
        events.extend(page["events"])
        if len(events) > max_events:
            raise CommandError(f"run {job_id} has more than {max_events} events: not checked")
        if page.get("next_after") is None or not page["events"]:
            break
        after = int(page["next_after"])
    result = verify_chain(events, job_id=job_id, last_seq=last_seq)
    return EventsVerification(job_id=job_id, events=len(events), checked=result.checked, unchained=result.unchained,
                              last_seq=last_seq or 0, head=result.head, broken=result.broken)


def _handle(args: argparse.Namespace) -> int:
    try:
        with client(args) as http:
            result = verify_run_events(http, args.run)
    except httpx.TransportError as e:
        raise CommandError(f"Cannot reach the API: {e}") from None
    emit(args, result.as_dict(), result.describe())
    return 0 if result.ok else EXIT_BROKEN


def add_verify_events(sub: argparse._SubParsersAction) -> None:
    """``verify-events`` under ``signoff audit``."""
    parser = sub.add_parser("verify-events", help="check a run's event log against its hash chain (exit 3 on a "
                                                  "break)")
    parser.add_argument("--run", required=True, metavar="JOB", help="the run's job id")
    add_client_options(parser)
    parser.set_defaults(handler=run_handler(_handle))


def _audit_subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:  # noqa: SLF001 - argparse keeps a parser's subcommands there
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``verify-events`` to ``signoff audit`` (made here when no other module made it)."""
    audit = subparsers.choices.get("audit")
    if audit is None:
        audit = subparsers.add_parser("audit", help="check the oversight record (docs/audit.md)")
    sub = _audit_subcommands(audit)
    if sub is None:
        sub = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)
    add_verify_events(sub)
