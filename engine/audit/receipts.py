"""Receipts of decisions (DESIGN §16, docs/audit.md): what a receipt holds, its canonical form,
its signature, and the checks an auditor runs on a run's receipts. Pure: no store, no I/O
(the keys are :mod:`signoff.engine.audit.keys`'s, the writes the store's).

- **Canonical JSON**: :mod:`signoff.engine.audit.canonical`.
- **Signature**: Ed25519 over the canonical JSON of the receipt without ``signature``
  (base64, standard alphabet). ``key_id``: the first 16 hex digits of sha256 of the raw
  public key.
- **Chain**: ``prev_sha256`` is the sha256 (hex) of the canonical JSON of the run's previous
  receipt, signature included; None for a run's first.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict

from signoff.engine.audit.canonical import canonical, canonical_text, sha256_hex
from signoff.engine.decisions import args_sha256, executed_args
from signoff.engine.errors import SignoffError
from signoff.engine.models import EXPIRED_ACTION, AppliedDecision, PendingRequest

__all__ = [
    "ALGORITHM", "FIELDS", "ArgsMismatch", "Break", "check_args", "public_keys", "Receipt", "ReceiptDraft", "args_sha256", "authority_of",
    "canonical", "check_chain", "check_signature", "executed_args", "justification", "key_id_of", "receipt_id",
    "sha256_hex", "shown", "shown_sha256", "sign", "SignedReceipt", "verify_run",
]

ALGORITHM = "Ed25519"
# the receipt's fields, in the order docs/audit.md lists them (the canonical form sorts them)
FIELDS = ("receipt_id", "job_id", "flow_id", "flow_version", "request_id", "kind", "decided_by", "authority", "via",
          "shown_sha256", "action_id", "values", "proposed_args", "executed_args", "justification", "at",
          "prev_sha256", "key_id", "signature")
# the values that say why (the first one present, as text)
JUSTIFICATION_KEYS = ("justification", "reason", "comment", "message")
JUSTIFICATION_MAX_CHARS = 4000
SIGNATURE = "signature"  # the one field the signature is not over


class ArgsMismatch(SignoffError):
    """The arguments a tool is about to run with are not the ones its decision approved."""

    code = "ARGS_MISMATCH"


class Receipt(BaseModel):
    """One decision on the record (docs/audit.md): the fields of DESIGN §16, signed."""

    model_config = ConfigDict(extra="forbid")

    receipt_id: str
    job_id: str
    flow_id: str
    flow_version: int
    request_id: str
    kind: Literal["gate", "tool"]
    decided_by: dict[str, str] | None
    authority: str
    via: str | None
    shown_sha256: str
    action_id: str
    values: dict[str, Any] | None
    proposed_args: dict[str, Any] | None
    executed_args: dict[str, Any] | None
    justification: str | None
    at: str
    prev_sha256: str | None
    key_id: str
    signature: str


def key_id_of(public_raw: bytes) -> str:
    """A key's short id: the first 16 hex digits of sha256 of its raw 32-byte public key."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def receipt_id(job_id: str, key: str) -> str:
    """The receipt's id, derived from the run and the record's dedupe key: an attempt run again
    under the same claim token makes the same id (and the store writes it once)."""
    return "rcpt_" + hashlib.sha256(f"{job_id}\x00{key}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def shown(pending: PendingRequest) -> dict[str, Any]:
    """What the person was shown of a request, on whatever surface: the prompt, the context
    (kind, the request's id), the options and allowed actions, the fields, the tool call (its
    name and arguments)."""
    return {
        "request_id": pending.request_id,
        "kind": pending.kind,
        "prompt": pending.prompt,
        "options": [o.model_dump(mode="json") for o in pending.options],
        "allowed_decisions": list(pending.allowed_decisions),
        "fields": pending.fields,
        "tool": pending.tool,
    }


def shown_sha256(pending: PendingRequest) -> str:
    return sha256_hex(shown(pending))


def check_args(args: Mapping[str, Any], expected_sha256: str | None, *, tool: str) -> None:
    """Refuse (ArgsMismatch) a tool call about to run with arguments whose hash is not the one
    its decision approved (``expected_sha256``: the receipt's ``executed_args``). None: the
    decision carries no hash (one recorded before receipts): nothing to compare."""
    if expected_sha256 is None:
        return
    got = sha256_hex(dict(args))
    if got != expected_sha256:
        raise ArgsMismatch(f"Tool '{tool}' was about to run with arguments (sha256 {got}) that are not the ones "
                           f"approved (sha256 {expected_sha256}); refused, it did not run", tool=tool,
                           expected_sha256=expected_sha256, got_sha256=got)


def justification(values: Mapping[str, Any] | None) -> str | None:
    """Why, in the decider's words: the values' justification, reason, comment or message."""
    for key in JUSTIFICATION_KEYS:
        value = (values or {}).get(key)
        if isinstance(value, str) and value.strip():
            return value[:JUSTIFICATION_MAX_CHARS]
    return None


def authority_of(*, timed_out: bool, owner: bool, refs: Iterable[str], at_pause: Iterable[str],
                 now: Iterable[str]) -> str:
    """Why the decider was allowed: ``timeout`` (the deadline, nobody), ``owner`` (the run is
    theirs and the request named nobody, or nobody else matched), ``approver`` (named in
    person), ``group:<name>`` (through a named group), ``escalation`` (added by the request's
    escalation). ``refs``: the decider's references (decisions.Decider.refs); ``at_pause``:
    the request's approvers when it paused; ``now``: as they are now (an escalation added)."""
    if timed_out:
        return "timeout"
    mine, first, current = set(refs), list(at_pause), list(now)
    if owner and not first:
        return "owner"
    for ref in first:
        if ref in mine and ref.startswith("user:"):
            return "approver"
    for ref in first:
        if ref in mine and ref.startswith("group:"):
            return "group:" + ref.partition("/")[2]
    if any(ref in mine for ref in current):
        return "escalation"
    return "owner" if owner else "approver"


@dataclass(frozen=True)
class ReceiptDraft:
    """A receipt without its place in the chain and its signature: what a decision attempt
    knows before the store write that chains and stores it."""

    body: dict[str, Any]

    @classmethod
    def of(cls, *, job_id: str, flow_id: str, flow_version: int, pending: PendingRequest, key: str,
           action_id: str, values: dict[str, Any] | None, decided_by: dict[str, str] | None, authority: str,
           via: str | None, at: str) -> "ReceiptDraft":
        kind = "tool" if pending.kind == "tool_approval" else "gate"
        proposed = pending.tool.get("args") if kind == "tool" and pending.tool is not None else None
        executed = executed_args(pending, action_id, values) if action_id != EXPIRED_ACTION else None
        return cls({
            "receipt_id": receipt_id(job_id, key), "job_id": job_id, "flow_id": flow_id,
            "flow_version": int(flow_version), "request_id": pending.request_id, "kind": kind,
            "decided_by": decided_by, "authority": authority, "via": via, "shown_sha256": shown_sha256(pending),
            "action_id": action_id, "values": values,
            "proposed_args": dict(proposed) if isinstance(proposed, dict) else None,
            "executed_args": executed, "justification": justification(values), "at": at,
        })

    @classmethod
    def of_decision(cls, *, job_id: str, flow_id: str, flow_version: int, pending: PendingRequest, key: str,
                    applied: AppliedDecision, decided_by: dict[str, str] | None, authority: str,
                    via: str | None) -> "ReceiptDraft":
        return cls.of(job_id=job_id, flow_id=flow_id, flow_version=flow_version, pending=pending, key=key,
                      action_id=applied.action_id, values=applied.values, decided_by=decided_by,
                      authority="timeout" if applied.timed_out else authority, via=via,
                      at=applied.decided_at.isoformat())

    def signed(self, prev_sha256: str | None, key_id: str, private: Ed25519PrivateKey) -> "SignedReceipt":
        """The receipt, chained after ``prev_sha256`` and signed; its own sha256; and its
        canonical JSON, the text the store keeps.

        The body is encoded once: the canonical JSON of an object is its members in key order
        between braces, so the members that sort before ``signature`` and those after it are
        encoded apart, joined without it for the bytes the signature is over, and with it for
        the receipt's text, which is hashed (the chain's link) and stored as it is. Each is
        exactly ``canonical()`` of the same dict (tests/unit/test_receipts.py checks them
        against it)."""
        body = {k: v for k, v in {**self.body, "prev_sha256": prev_sha256, "key_id": key_id}.items()
                if k != SIGNATURE}
        before = canonical_text({k: v for k, v in body.items() if k < SIGNATURE})[1:-1]
        after = canonical_text({k: v for k, v in body.items() if k > SIGNATURE})[1:-1]
        unsigned = "{" + ",".join(m for m in (before, after) if m) + "}"
        signature = base64.b64encode(private.sign(unsigned.encode("utf-8", "surrogatepass"))).decode("ascii")
        text = "{" + ",".join(m for m in (before, f'"{SIGNATURE}":"{signature}"', after) if m) + "}"
        return SignedReceipt({**body, SIGNATURE: signature},
                             hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), text)


class SignedReceipt(NamedTuple):
    """A receipt as ReceiptDraft.signed makes it: the fields, their sha256 (what the run's next
    receipt names as ``prev_sha256``), and their canonical JSON (what the store keeps: the
    bytes hashed, read back as the same fields)."""

    receipt: dict[str, Any]
    sha256: str
    text: str


def sign(private: Ed25519PrivateKey, body: Mapping[str, Any]) -> str:
    """The base64 Ed25519 signature of ``body``'s canonical JSON (``signature`` left out)."""
    unsigned = {k: v for k, v in body.items() if k != "signature"}
    return base64.b64encode(private.sign(canonical(unsigned))).decode("ascii")


# ---- the checks (signoff audit verify): each names what is wrong, the first break wins --------


@dataclass(frozen=True)
class Break:
    """What is wrong with a receipt: its id (or its position when it has none), and why."""

    receipt_id: str
    job_id: str | None
    problem: str

    def __str__(self) -> str:
        return f"receipt {self.receipt_id} (run {self.job_id}): {self.problem}"


def public_keys(keys: Iterable[Mapping[str, Any]]) -> dict[str, Ed25519PublicKey]:
    """``{key_id: public key}`` from the public-key endpoint's ``keys`` (or a ``--keys`` file);
    a key whose id is not its own hash is left out (it would vouch for nothing)."""
    found: dict[str, Ed25519PublicKey] = {}
    for item in keys:
        try:
            raw = base64.b64decode(str(item["public_key"]), validate=True)
            key = Ed25519PublicKey.from_public_bytes(raw)
        except (KeyError, ValueError, TypeError):
            continue
        if key_id_of(raw) == item.get("key_id"):
            found[key_id_of(raw)] = key
    return found


def check_signature(receipt: Mapping[str, Any], keys: Mapping[str, Ed25519PublicKey]) -> Break | None:
    """The receipt is well formed and signed by one of ``keys``."""
    rid, job = str(receipt.get("receipt_id") or "?"), receipt.get("job_id")
    missing = [f for f in FIELDS if f not in receipt]
    extra = [f for f in receipt if f not in FIELDS]
    if missing or extra:
        return Break(rid, job, "not a receipt: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else [])))
    key = keys.get(str(receipt["key_id"]))
    if key is None:
        return Break(rid, job, f"signed by an unknown key {receipt['key_id']!r}")
    try:
        signature = base64.b64decode(str(receipt["signature"]), validate=True)
        key.verify(signature, canonical({k: v for k, v in receipt.items() if k != "signature"}))
    except (ValueError, InvalidSignature):
        return Break(rid, job, "the signature does not match its content (changed after it was signed)")
    return None


def _link(receipt: Mapping[str, Any], i: int, prev: str | None, from_start: bool) -> Break | None:
    """The ``i``-th receipt of a run names ``prev`` (the hash of the one before it)."""
    if i == 0 and not from_start:
        return None
    if receipt.get("prev_sha256") == prev:
        return None
    rid, job = str(receipt.get("receipt_id") or f"#{i + 1}"), receipt.get("job_id")
    if prev is None:
        return Break(rid, job, "the run's first receipt names a previous one (an earlier receipt was removed)")
    return Break(rid, job, "prev_sha256 is not the hash of the receipt before it (a receipt was removed, "
                           "reordered or changed)")


def check_chain(receipts: list[Mapping[str, Any]], *, from_start: bool = True) -> Break | None:
    """A run's receipts, in their order, each naming the one before it (``prev_sha256``); the
    first names none when ``from_start`` (the whole run), else it is taken as it is (an export
    that starts in the middle of a run)."""
    prev: str | None = None
    for i, receipt in enumerate(receipts):
        broken = _link(receipt, i, prev, from_start)
        if broken is not None:
            return broken
        prev = sha256_hex(dict(receipt))
    return None


def verify_run(receipts: list[Mapping[str, Any]], keys: Mapping[str, Ed25519PublicKey], *,
               from_start: bool = True) -> Break | None:
    """Each receipt in turn, its signature then its link to the one before: the first break,
    or None."""
    prev: str | None = None
    for i, receipt in enumerate(receipts):
        broken = check_signature(receipt, keys) or _link(receipt, i, prev, from_start)
        if broken is not None:
            return broken
        prev = sha256_hex(dict(receipt))
    return None
