"""Receipts (DESIGN §16, docs/audit.md) through the real parts: the app, a worker and the
Temporal dev server. A decision by the API, each vote of a quorum, a decision through a group,
the page, the CLI and a Temporal Update each leave one signed receipt in their run's chain, with
who decided, why they were allowed, how it was sent and a hash of what they were shown; the run's
receipts are for whoever may see the run; `signoff audit export` is the operator's alone and
`signoff audit verify` passes on a clean export and names the receipt an edit of the database
broke."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from typing import Any

import httpx
import pytest

from signoff.commands.audit import check_receipts
from signoff.engine.audit.receipts import public_keys, sha256_hex, shown_sha256
from signoff.engine.models import JobStatus
from tests.helpers import signoff_cli
from tests.integration.api.conftest import Harness
from tests.integration.decisions.conftest import gate_flow, resume, run_suspended, uid, upload, user_name
from tests.integration.decisions.test_temporal_surface import _update



@pytest.fixture(scope="module", autouse=True)
def operator(h: Harness) -> str:
    """erin is the deployment's operator (SIGNOFF_OPERATORS) in this module."""
    h.settings.operators = uid(h, "erin")
    return "erin"


async def receipts(h: Harness, who: str, job_id: str) -> httpx.Response:
    async with h.client(who) as c:
        return await c.get(f"/api/v1/runs/{job_id}/receipts")


async def keys(h: Harness) -> dict[str, Any]:
    async with h.client("bob") as c:
        r = await c.get("/api/v1/audit/public-key")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["algorithm"] == "Ed25519" and body["key_id"] == body["keys"][-1]["key_id"]
    return public_keys(body["keys"])


async def run_receipts(h: Harness, job_id: str, n: int) -> list[dict[str, Any]]:
    """The run's receipts (as its owner reads them), once there are ``n``; each one verified."""
    r = await receipts(h, "alice", job_id)
    assert r.status_code == 200, r.text
    found = r.json()["receipts"]
    assert [x["seq"] for x in found] == list(range(1, n + 1)), found
    assert check_receipts(found, await keys(h), whole_run=True) is None
    return found


def _cli(url: str, key: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return signoff_cli(*args, "--api-url", url, "--api-key", key, stdin=stdin)


async def test_an_api_decision_has_its_receipt_for_whoever_sees_the_run(h: Harness):
    flow_id = await upload(h, gate_flow({}, name="receipt-api"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    shown = (await h.store.get_job(job_id)).pending
    r = await resume(h, "alice", job_id, "reject", {"reason": "not this month"})
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    [receipt] = await run_receipts(h, job_id, 1)
    job = await h.store.get_job(job_id)
    assert receipt["job_id"] == job_id and receipt["flow_id"] == flow_id and receipt["flow_version"] == job.flow_version
    assert receipt["request_id"] == f"gate:{job_id}" and receipt["kind"] == "gate"
    assert receipt["decided_by"] == {"id": uid(h, "alice"), "name": await user_name(h, "alice")}
    assert receipt["authority"] == "owner" and receipt["via"] == "api"
    assert receipt["action_id"] == "reject" and receipt["values"] == {"reason": "not this month"}
    assert receipt["justification"] == "not this month"
    assert receipt["proposed_args"] is None and receipt["executed_args"] is None
    assert receipt["shown_sha256"] == shown_sha256(shown) and receipt["prev_sha256"] is None
    decided = [e for e in await h.store.read_events(job_id) if e.event == "human_input_decision"][0]
    assert receipt["at"] == decided.data["decided_at"]
    # whoever may not see the run does not see its receipts either
    assert (await receipts(h, "erin", job_id)).status_code == 404
    assert (await receipts(h, "bob", "../../v1/flows")).status_code in (404, 422)


async def test_each_vote_of_a_quorum_and_a_group_approver_have_their_own_receipt(h: Harness):
    bob, carol = await user_name(h, "bob"), await user_name(h, "carol")
    group = f"ops-{uuid.uuid4().hex[:6]}"
    async with h.client("alice") as c:
        r = await c.post("/api/v1/groups", json={"name": group, "members": [carol]})
    assert r.status_code == 201, r.text
    flow_id = await upload(h, gate_flow({"approvers": [bob, f"group:{group}"], "required_approvals": 2},
                                        name="receipt-quorum"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    r = await resume(h, "bob", job_id, "approve", {"comment": "looks right"})
    assert r.status_code == 200, r.text
    first = await run_receipts(h, job_id, 1)  # the vote that resolves nothing yet, on the record already
    assert first[0]["authority"] == "approver" and first[0]["decided_by"]["id"] == uid(h, "bob")
    assert first[0]["justification"] == "looks right"
    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    vote, decision = await run_receipts(h, job_id, 2)
    assert vote == first[0]
    assert decision["decided_by"]["id"] == uid(h, "carol") and decision["authority"] == f"group:{group}"
    assert decision["prev_sha256"] == sha256_hex({k: v for k, v in vote.items() if k != "seq"})
    # an approver who took part sees the run's receipts
    assert [x["seq"] for x in (await receipts(h, "bob", job_id)).json()["receipts"]] == [1, 2]


async def test_the_page_the_cli_and_temporal_each_leave_a_receipt(h: Harness, live: str, temporal_server):
    bob = await user_name(h, "bob")
    flow_id = await upload(h, gate_flow({"approvers": [bob]}, name="receipt-surfaces"))
    by_page, by_cli, by_temporal = [(await run_suspended(h, flow_id))["job_id"] for _ in range(3)]
    # the page: bob signed in, his inbox's form
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=h.app), base_url="http://t") as page:
        token = re.search(r'name="token" value="([^"]+)"', (await page.get("/sign-in")).text).group(1)
        r = await page.post("/sign-in", data={"token": token, "next": "/", "api_key": h.users["bob"][1]})
        assert r.status_code == 303, r.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', (await page.get("/")).text).group(1)
        r = await page.post("/inbox/decide", data={"csrf": csrf, "item": [f"{by_page}|gate:{by_page}"],
                                                   "action_id": "approve"})
        assert r.status_code == 303 and "decided=1" in r.headers["location"], r.headers
    # the CLI
    done = await asyncio.to_thread(_cli, live, h.users["bob"][1], "resume", by_cli, "--action", "approve")
    assert done.returncode == 0, done.stderr
    # a Temporal Update naming bob
    sent = await _update(temporal_server, by_temporal, user=bob, identity="ops-console")
    assert sent.returncode == 0, sent.stderr
    vias = {}
    for job_id in (by_page, by_cli, by_temporal):
        await h.wait_status(job_id, JobStatus.completed)
        [receipt] = await run_receipts(h, job_id, 1)
        assert receipt["decided_by"]["id"] == uid(h, "bob") and receipt["authority"] == "approver"
        vias[job_id] = receipt["via"]
    assert vias == {by_page: "page", by_cli: "api", by_temporal: "temporal"}


async def test_export_is_the_operators_and_verify_names_the_first_break(h: Harness, live: str, tmp_path):
    since = "2000-01-01"
    flow_id = await upload(h, gate_flow({}, name="receipt-export"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    assert (await resume(h, "alice", job_id, "approve")).status_code == 200
    await h.wait_status(job_id, JobStatus.completed)
    await run_receipts(h, job_id, 1)

    # another user's runs: only the operator exports them (alice is not one, even for her own flow)
    async with h.client("alice") as c:
        r = await c.get("/api/v1/audit/receipts", params={"since": since, "flow": flow_id})
    assert r.status_code == 403 and r.json()["detail"]["code"] == "FORBIDDEN"
    refused = await asyncio.to_thread(_cli, live, h.users["alice"][1], "audit", "export", "--since", since)
    assert refused.returncode == 1 and "FORBIDDEN" in refused.stderr and refused.stdout == ""
    async with h.client("erin") as c:
        r = await c.get("/api/v1/audit/receipts", params={"since": "not a date"})
        assert r.status_code == 422
        r = await c.get("/api/v1/audit/receipts", params={"since": since, "cursor": "bm9wZQ=="})
        assert r.status_code == 422 and r.json()["detail"]["code"] == "INVALID_REQUEST"

    erin = h.users["erin"][1]
    for fmt in ("jsonl", "csv"):
        out = await asyncio.to_thread(_cli, live, erin, "audit", "export", "--since", since, "--flow", flow_id,
                                      "--format", fmt)
        assert out.returncode == 0, out.stderr
        path = tmp_path / f"export.{fmt}"
        path.write_text(out.stdout)
        if fmt == "jsonl":
            assert [json.loads(line)["job_id"] for line in out.stdout.splitlines()] == [job_id]
        ok = await asyncio.to_thread(_cli, live, erin, "audit", "verify", str(path))
        assert ok.returncode == 0 and "OK: 1 receipt(s) of 1 run(s)" in ok.stdout, (ok.stdout, ok.stderr)
    # offline: the keys from a file, no server (a dead URL)
    async with h.client("erin") as c:
        (tmp_path / "keys.json").write_text((await c.get("/api/v1/audit/public-key")).text)
    offline = await asyncio.to_thread(_cli, "http://127.0.0.1:9", erin, "audit", "verify", str(tmp_path / "export.jsonl"),
                                      "--keys", str(tmp_path / "keys.json"))
    assert offline.returncode == 0, (offline.stdout, offline.stderr)
    ok = await asyncio.to_thread(_cli, live, h.users["alice"][1], "audit", "verify", "--run", job_id)
    assert ok.returncode == 0 and "OK" in ok.stdout, (ok.stdout, ok.stderr)

    # the receipt's row edited in the database: the run's verify names it
    [row] = await h.store.read_receipts(job_id)
    edited = {**row.body, "action_id": "reject"}
    async with h.store._tx(write=True) as tx:  # type: ignore[attr-defined]
        await tx.execute("UPDATE receipts SET body = ? WHERE receipt_id = ?",
                         (h.store._enc_json(edited), row.receipt_id))  # type: ignore[attr-defined]
    broken = await asyncio.to_thread(_cli, live, h.users["alice"][1], "audit", "verify", "--run", job_id)
    assert broken.returncode == 2, (broken.stdout, broken.stderr)
    assert row.receipt_id in broken.stdout and "signature does not match" in broken.stdout
    # and so does the file's verify, for a line edited in the export
    line = json.loads((tmp_path / "export.jsonl").read_text())
    (tmp_path / "edited.jsonl").write_text(json.dumps({**line, "values": {"x": 1}}) + "\n")
    broken = await asyncio.to_thread(_cli, live, erin, "audit", "verify", str(tmp_path / "edited.jsonl"))
    assert broken.returncode == 2 and row.receipt_id in broken.stdout
