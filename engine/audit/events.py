"""The event log's hash chain (DESIGN §16, docs/audit.md "The event log's hash chain").

Every event a store appends carries ``sha256``: the SHA-256 of the canonical JSON of
``{job_id, seq, event, data, at, prev_sha256}`` (:func:`event_sha256`), where ``prev_sha256``
is the ``sha256`` of the run's previous event (``None`` for its first). The store computes it in
the transaction that takes the event's seq, so the chain follows the seq order and has no fork.

:func:`verify_events` checks a run's events as read back (from the store, or from ``GET
/api/v1/runs/{job_id}/events`` by a client, offline) and names the first break: an event whose
content changed (its hash no longer matches), one removed (a gap in the seqs, or the next
event's ``prev_sha256`` is not its predecessor's hash), reordered events (seqs not increasing,
or a chain link that points elsewhere), the log cut short (fewer events than the run's counter
says it appended). Events written before the chain existed (migration 14) have no hash: they
are reported as unchained, and an unchained event after a chained one is a break.

Pure: no store, no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

__all__ = ["Break", "ChainResult", "canonical_json", "canonical_at", "chained_sha256", "event_sha256", "verify_chain",
           "verify_events"]

BreakKind = Literal["changed", "removed", "reordered", "truncated", "unchained", "malformed"]


def canonical_json(value: Any) -> str:
    """The one text of a JSON value: keys sorted, no spaces, unicode kept, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_at(at: datetime | str | None) -> str | None:
    """An event's time as hashed: UTC, ISO 8601 with microseconds and ``+00:00`` (an ISO text,
    such as the API's ``...Z``, is read first, so any rendering of the same instant hashes the
    same)."""
    if at is None:
        return None
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00") if at.endswith("Z") else at)
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return at.astimezone(timezone.utc).isoformat(timespec="microseconds")


def event_sha256(job_id: str, seq: int, event: str, data: Any, at: datetime | str | None,
                 prev_sha256: str | None) -> str:
    """The hash of one event, chained to ``prev_sha256`` (hex)."""
    return chained_sha256(job_id, seq, event, canonical_json(data), at, prev_sha256)


def chained_sha256(job_id: str, seq: int, event: str, data_json: str, at: datetime | str | None,
                   prev_sha256: str | None) -> str:
    """:func:`event_sha256` with the data already in canonical JSON (``data_json``): what a store
    computes inside its append's transaction, the data's part done before it. The text hashed
    is the canonical JSON of the whole event (keys in sorted order), put together here."""
    dump = _STRING.encode
    text = (f'{{"at":{dump(canonical_at(at))},"data":{data_json},"event":{dump(event)},"job_id":{dump(job_id)},'
            f'"prev_sha256":{dump(prev_sha256)},"seq":{_int(seq)}}}')
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_STRING = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def _int(seq: Any) -> str:
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise TypeError(f"a seq is an integer, not {type(seq).__name__}")
    return str(seq)


@dataclass(frozen=True)
class Break:
    """The first place the chain does not hold: at ``seq`` (the event found there, or the seq
    expected), of ``kind``, with a sentence saying what is wrong."""

    seq: int
    kind: BreakKind
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class ChainResult:
    """What :func:`verify_chain` found: ``checked`` events verified, the first ``unchained``
    events written before the chain existed (not verifiable), the hash of the last event
    (``head``), and the first break, if any."""

    checked: int
    unchained: int
    head: str | None
    broken: Break | None

    @property
    def ok(self) -> bool:
        return self.broken is None


def _field(event: Any, name: str) -> Any:
    if isinstance(event, Mapping):
        if name == "created_at" and name not in event:
            return event.get("at")
        return event.get(name)
    return getattr(event, name, None)


def verify_chain(events: Iterable[Any], *, job_id: str | None = None, last_seq: int | None = None) -> ChainResult:
    """Check a run's events, in the order given (as stored: by seq), each an object or a mapping
    with ``job_id`` (or pass ``job_id``), ``seq``, ``event``, ``data``, ``created_at`` (or
    ``at``), ``sha256`` and ``prev_sha256``. ``last_seq``, when known (the run's counter), is the
    seq the log should end at: fewer events is a cut."""
    events = list(events)
    where = {}
    for ev in events:  # which seq each hash stands at: a link to a later event means a move
        sha = _field(ev, "sha256")
        if isinstance(sha, str):
            where.setdefault(sha, _field(ev, "seq"))
    checked = unchained = 0
    prev_sha: str | None = None
    prev_seq = 0
    chained = False
    for ev in events:
        seq, sha, link = _field(ev, "seq"), _field(ev, "sha256"), _field(ev, "prev_sha256")
        run = job_id if job_id is not None else _field(ev, "job_id")
        if not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(run, str):
            return ChainResult(checked, unchained, prev_sha,
                               Break(prev_seq + 1, "malformed", f"the event after seq {prev_seq} has no integer seq "
                                                               "or no job id"))
        if seq <= prev_seq:
            return ChainResult(checked, unchained, prev_sha,
                               Break(seq, "reordered", f"event seq {seq} comes after seq {prev_seq}: the log is "
                                                       "out of order"))
        if seq != prev_seq + 1:
            missing = f"seq {prev_seq + 1}" if seq == prev_seq + 2 else f"seqs {prev_seq + 1} to {seq - 1}"
            return ChainResult(checked, unchained, prev_sha,
                               Break(prev_seq + 1, "removed", f"{missing} missing: event seq {seq} follows seq "
                                                              f"{prev_seq}"))
        if sha is None:
            if chained:
                return ChainResult(checked, unchained, prev_sha,
                                   Break(seq, "unchained", f"event seq {seq} has no hash, yet seq {prev_seq} before "
                                                           "it is chained: its hash was removed"))
            unchained += 1
            prev_seq, prev_sha = seq, None
            continue
        if link != prev_sha:
            return ChainResult(checked, unchained, prev_sha, _bad_link(seq, link, prev_seq, prev_sha, where))
        try:
            expected = event_sha256(run, seq, _field(ev, "event"), _field(ev, "data"), _field(ev, "created_at"),
                                    link)
        except (TypeError, ValueError, RecursionError) as err:  # what a hostile server could send
            return ChainResult(checked, unchained, prev_sha,
                               Break(seq, "malformed", f"event seq {seq} cannot be hashed: {err}"))
        if expected != sha:
            return ChainResult(checked, unchained, prev_sha,
                               Break(seq, "changed", f"event seq {seq} ({_field(ev, 'event')!s:.60}) does not match "
                                                     "its hash: its name, data, time or seq was changed"))
        chained, checked, prev_seq, prev_sha = True, checked + 1, seq, sha
    if last_seq is not None and last_seq > prev_seq:
        missing = f"seq {last_seq}" if last_seq == prev_seq + 1 else f"seqs {prev_seq + 1} to {last_seq}"
        return ChainResult(checked, unchained, prev_sha,
                           Break(prev_seq + 1, "truncated", f"{missing} missing: the run appended {last_seq} events, "
                                                            f"the log ends at seq {prev_seq}"))
    return ChainResult(checked, unchained, prev_sha, None)


def _bad_link(seq: int, link: Any, prev_seq: int, prev_sha: str | None, where: dict[str, Any]) -> Break:
    """The break of an event whose ``prev_sha256`` is not its predecessor's hash: a move when it
    links to an event that stands elsewhere in the log, else a removal (it links to an event no
    longer there)."""
    before = f"seq {prev_seq} ({prev_sha[:12]}...)" if prev_sha is not None else "nothing chained"
    if isinstance(link, str) and link in where:
        return Break(seq, "reordered", f"event seq {seq} links to the event now at seq {where[link]}, "
                                       f"not to {before}: events were moved")
    if link is None:
        return Break(seq, "removed", f"event seq {seq} says it is the run's first, yet {before} comes before it")
    return Break(seq, "removed", f"event seq {seq} links to {str(link)[:12]}..., an event no longer in the log "
                                 f"(before it: {before}): an event was removed or replaced")


def verify_events(events: Iterable[Any], *, job_id: str | None = None, last_seq: int | None = None) -> Break | None:
    """The first break in a run's events (see :func:`verify_chain`), or None."""
    return verify_chain(events, job_id=job_id, last_seq=last_seq).broken
