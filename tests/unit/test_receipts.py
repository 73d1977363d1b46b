"""The receipt's pure parts (engine/audit, docs/audit.md): the canonical form, the signature and
its check, the chain's, why a person was allowed, the arguments a decision approves, and the
export's CSV read back as it was written."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from signoff.commands.audit import by_run, check_receipts, csv_columns, csv_row, from_csv
from signoff.engine.audit.canonical import canonical, sha256_hex
from signoff.engine.audit.receipts import (
    ArgsMismatch,
    Receipt,
    ReceiptDraft,
    authority_of,
    check_args,
    key_id_of,
    public_keys,
    verify_run,
)
from signoff.engine.decisions import args_sha256, executed_args
from signoff.engine.models import Option, PendingRequest, utcnow

KEY = Ed25519PrivateKey.generate()
RAW = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
KEY_ID = key_id_of(RAW)
KEYS = public_keys([{"key_id": KEY_ID, "public_key": base64.b64encode(RAW).decode()}])


def tool_request() -> PendingRequest:
    return PendingRequest(request_id="agent:r:1", kind="tool_approval", prompt="call refund?", paused_at=utcnow(),
                          options=[Option(action_id="approve", label="Approve"), Option(action_id="edit", label="Edit")],
                          allowed_decisions=["approve", "edit", "reject"], tool={"name": "refund", "args": {"b": "5 €"}})


def chain(n: int) -> list[dict]:
    found, prev = [], None
    for i in range(n):
        draft = ReceiptDraft.of(job_id="j", flow_id="f", flow_version=2, pending=tool_request(), key=f"k{i}",
                                action_id="edit", values={"args": {"b": f"{i} €"}, "reason": "  "},
                                decided_by={"id": "u", "name": "Ünï"}, authority="approver", via="page",
                                at=utcnow().isoformat())
        receipt, sha, _ = draft.signed(prev, key_id=KEY_ID, private=KEY)
        found.append(receipt)
        prev = sha
    return found


def test_the_canonical_form_sorts_keys_and_keeps_utf8():
    assert canonical({"b": 1, "a": {"é": [1, 2.5, None, True]}}) == '{"a":{"é":[1,2.5,null,true]},"b":1}'.encode()


@pytest.mark.parametrize("values", [
    None,
    {},
    # the receipt's own field names inside a field: the two halves are split at the top level only
    {"signature": "forged", "values": {"via": "x", "prev_sha256": None}, "shown_sha256": "y", "reason": "ok"},
    # what the canonical form must keep as it is: non-ASCII, outside the BMP, escapes, floats
    {"é": "ü", "\U0001F600": ["\u2028", 1.5, -0.0, 10**20, 1e-7], "": None, 'a"b': "c\\d\n", "z": {"a": [{}]}},
])
@pytest.mark.parametrize("prev", [None, "ab" * 32])
def test_a_signed_receipt_is_its_canonical_json_encoded_once(values, prev):
    """ReceiptDraft.signed encodes the body once (the members before ``signature`` and after it
    apart) and joins them: the text it stores is exactly canonical() of the receipt, its sha256
    is sha256_hex of it, and the signature is over canonical() of the receipt without it."""
    draft = ReceiptDraft.of(job_id="j", flow_id="f", flow_version=2, pending=tool_request(), key="k",
                            action_id="edit", values=values, decided_by={"id": "u", "name": "Ünï \U0001F600"},
                            authority="approver", via=None, at=utcnow().isoformat())
    made = draft.signed(prev, key_id=KEY_ID, private=KEY)
    assert made.text.encode("utf-8") == canonical(made.receipt)
    assert made.sha256 == sha256_hex(made.receipt)
    assert json.loads(made.text) == made.receipt and list(made.receipt) == [*draft.body, "prev_sha256", "key_id",
                                                                            "signature"]
    unsigned = {k: v for k, v in made.receipt.items() if k != "signature"}
    KEY.public_key().verify(base64.b64decode(made.receipt["signature"]), canonical(unsigned))  # raises if not
    assert verify_run([made.receipt], KEYS, from_start=prev is None) is None


def test_a_receipt_that_json_cannot_hold_is_refused():
    """NaN has no JSON words: signed refuses (ValueError; the store says StoreError) rather than
    signing and storing ``NaN``."""
    draft = ReceiptDraft.of(job_id="j", flow_id="f", flow_version=2, pending=tool_request(), key="k",
                            action_id="approve", values={"x": float("nan")}, decided_by=None,
                            authority="timeout", via=None, at=utcnow().isoformat())
    with pytest.raises(ValueError):
        draft.signed(None, key_id=KEY_ID, private=KEY)


def test_a_receipt_is_the_documented_form_and_verifies():
    receipts = chain(3)
    for r in receipts:
        Receipt.model_validate(r)  # every field of DESIGN §16, no other
    assert receipts[0]["kind"] == "tool" and receipts[0]["proposed_args"] == {"b": "5 €"}
    assert receipts[1]["executed_args"] == {"b": "1 €"} and receipts[0]["justification"] is None  # blank: none
    assert receipts[0]["key_id"] == KEY_ID and len(KEY_ID) == 16
    assert verify_run(receipts, KEYS) is None


@pytest.mark.parametrize("tamper, where, says", [
    (lambda rs: rs[1].update(action_id="approve"), 1, "signature"),
    (lambda rs: rs.pop(1), 1, "prev_sha256"),
    (lambda rs: rs.insert(0, rs.pop(1)), 0, "first receipt"),
    (lambda rs: rs.pop(0), 0, "first receipt"),
    (lambda rs: rs[2].update(key_id="ffffffffffffffff"), 2, "unknown key"),
    (lambda rs: rs[2].pop("via"), 2, "not a receipt"),
    (lambda rs: rs[2].update(signature="!!"), 2, "signature"),
])
def test_each_kind_of_tampering_is_named(tamper, where, says):
    receipts = chain(3)
    tamper(receipts)
    broken = verify_run(receipts, KEYS)
    assert broken is not None and says in broken.problem, broken
    assert broken.receipt_id == receipts[where]["receipt_id"]


def test_a_key_whose_id_is_not_its_hash_vouches_for_nothing():
    assert public_keys([{"key_id": "0" * 16, "public_key": base64.b64encode(RAW).decode()},
                        {"key_id": KEY_ID, "public_key": "not base64"}]) == {}


def test_an_export_may_start_inside_a_run_but_a_run_may_not():
    receipts = [{**r, "seq": i + 1} for i, r in enumerate(chain(3))]
    assert check_receipts(receipts[1:], KEYS, whole_run=False) is None  # the window's first is seq 2
    assert check_receipts(receipts[1:], KEYS, whole_run=True) is not None
    assert by_run(reversed(receipts))["j"] == receipts  # by seq, whatever the file's order


def test_the_csv_reads_back_as_written():
    receipts = [{**r, "seq": i + 1} for i, r in enumerate(chain(2))]
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(csv_columns())
    for r in receipts:
        writer.writerow(csv_row(r))
    assert from_csv(out.getvalue()) == receipts
    assert check_receipts(from_csv(out.getvalue()), KEYS, whole_run=True) is None


def test_why_a_person_was_allowed():
    me = {"user:me", "group:owner/ops"}
    assert authority_of(timed_out=True, owner=False, refs=me, at_pause=[], now=[]) == "timeout"
    assert authority_of(timed_out=False, owner=True, refs=me, at_pause=[], now=["user:me", "user:x"]) == "owner"
    assert authority_of(timed_out=False, owner=False, refs=me, at_pause=["group:owner/ops", "user:me"],
                        now=["group:owner/ops", "user:me"]) == "approver"
    assert authority_of(timed_out=False, owner=False, refs=me, at_pause=["group:owner/ops"],
                        now=["group:owner/ops"]) == "group:ops"
    assert authority_of(timed_out=False, owner=False, refs=me, at_pause=["user:x"],
                        now=["user:x", "user:me"]) == "escalation"


def test_the_approved_arguments_and_their_check():
    req = tool_request()
    assert executed_args(req, "approve", None) == {"b": "5 €"}
    assert executed_args(req, "edit", {"args": '{"b": "4 €"}'}) == {"b": "4 €"}
    assert executed_args(req, "reject", None) is None and executed_args(None, "approve", None) is None
    approved = args_sha256({"b": "4 €"})
    check_args({"b": "4 €"}, approved, tool="refund")
    check_args({"anything": 1}, None, tool="refund")  # a decision from before receipts: nothing to compare
    with pytest.raises(ArgsMismatch) as e:
        check_args({"b": "4 €", "extra": 1}, approved, tool="refund")
    assert e.value.code == "ARGS_MISMATCH"
