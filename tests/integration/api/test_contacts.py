"""A person's contacts (DESIGN §14): set by ``PATCH /api/v1/users/me`` and ``signoff users
create/set``, shown with their state (verified: set by the operator; pending: set by the person, until
confirmed) by ``GET /api/v1/users/me`` and ``signoff users list``; an address that could
add a header or a recipient to a mail is refused (422 INVALID_CONTACT), nothing changed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import signoff_cli

ROOT = Path(__file__).resolve().parents[3]


async def test_patch_me_sets_keeps_and_clears_contacts(api) -> None:
    async with api.client("bob") as c:
        r = await c.patch("/api/v1/users/me", json={"email": "  bob@example.com ", "slack": "U024BE7LH"})
        assert r.status_code == 200, r.text
        assert (r.json()["email"], r.json()["slack"]) == ("bob@example.com", "U024BE7LH")
        # set by the person: pending (no channel is configured here, so no confirmation is sent)
        assert (r.json()["email_state"], r.json()["slack_state"]) == ("pending", "pending")
        assert r.json()["verification"] == {"email": "unconfigured", "slack": "unconfigured"}
        r = await c.patch("/api/v1/users/me", json={"slack": None})
        assert (r.json()["email"], r.json()["slack"]) == ("bob@example.com", None)
        me = (await c.get("/api/v1/users/me")).json()
        assert (me["email"], me["slack"]) == ("bob@example.com", None)
        assert (me["email_state"], me["slack_state"], me["verification"]) == ("pending", None, None)
        r = await c.patch("/api/v1/users/me", json={"email": ""})
        assert r.status_code == 200 and r.json()["email"] is None


@pytest.mark.parametrize("body", [
    {"email": "bob@example.com\r\nBcc: everyone@example.com"},
    {"email": "bob@example.com\nSubject: x"},
    {"email": "Bob <bob@example.com>"},
    {"email": "bob@example.com, eve@example.com"},
    {"email": "bob"},
    {"email": "x" * 250 + "@example.com"},
    {"email": "b\x00b@example.com"},
    {"slack": "U024\r\nBE7LH"},
    {"slack": "<@U024BE7LH>"},
    {"slack": "u" * 40},
])
async def test_patch_me_refuses_what_could_inject_or_is_not_a_contact(api, body) -> None:
    async with api.client("alice") as c:
        before = (await c.get("/api/v1/users/me")).json()
        r = await c.patch("/api/v1/users/me", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["detail"]["code"] in ("INVALID_CONTACT", "INVALID_REQUEST")
        after = (await c.get("/api/v1/users/me")).json()
    assert (after["email"], after["slack"]) == (before["email"], before["slack"])


async def test_a_slack_id_is_one_users(api) -> None:
    async with api.client("alice") as a, api.client("bob") as b:
        r = await a.patch("/api/v1/users/me", json={"slack": "U0ALICE42"})
        assert r.status_code == 200 and r.json()["slack_state"] == "pending", r.text
        # a pending claim holds nothing (a squatter cannot keep the owner out): bob's takes it
        r = await b.patch("/api/v1/users/me", json={"slack": "U0ALICE42"})
        assert r.status_code == 200 and r.json()["slack_state"] == "pending", r.text
        assert (await a.get("/api/v1/users/me")).json()["slack"] is None
        # verified (here the operator vouches), it is alice's: bob's claim is 409, nothing of his changed
        await api.store.set_contacts(api.users["alice"][0], {"slack": "U0ALICE42"}, verified=True)
        assert (await b.get("/api/v1/users/me")).json()["slack"] is None
        r = await b.patch("/api/v1/users/me", json={"slack": "U0ALICE42", "email": "bob2@example.com"})
        assert r.status_code == 409 and r.json()["detail"]["code"] == "CONTACT_TAKEN", r.text
        assert (await b.get("/api/v1/users/me")).json()["email"] != "bob2@example.com"  # nothing changed
        assert (await a.patch("/api/v1/users/me", json={"slack": "U0ALICE42"})).status_code == 200
        assert (await a.patch("/api/v1/users/me", json={"slack": None})).status_code == 200
        assert (await b.patch("/api/v1/users/me", json={"slack": "U0ALICE42"})).status_code == 200  # free again
        assert (await b.patch("/api/v1/users/me", json={"slack": None})).status_code == 200


async def test_patch_me_refuses_unknown_fields_and_too_long_bodies(api) -> None:
    async with api.client("alice") as c:
        r = await c.patch("/api/v1/users/me", json={"phone": "+1"})
        assert r.status_code == 422 and r.json()["detail"]["code"] == "INVALID_REQUEST"
        r = await c.patch("/api/v1/users/me", json={"email": "a" * 100_000})
        assert r.status_code == 422


def test_cli_create_set_and_list_contacts(tmp_path: Path, monkeypatch) -> None:
    for key in [k for k in os.environ if k.startswith("SIGNOFF_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SIGNOFF_HOME", str(tmp_path))
    monkeypatch.chdir(ROOT)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return signoff_cli("users", *args)

    made = cli("create", "carol", "--new-database", "--email", "carol@example.com", "--slack", "U0CAROL1")
    assert made.returncode == 0, made.stderr
    listed = cli("list")
    # the operator vouches: verified
    assert "carol@example.com (verified)\tU0CAROL1 (verified)" in listed.stdout, listed.stdout
    assert cli("set", "carol", "--slack", "").returncode == 0
    assert "carol@example.com (verified)\t-" in cli("list").stdout
    as_json = json.loads(cli("list", "--json").stdout)
    assert (as_json[0]["email_state"], as_json[0]["slack_state"]) == ("verified", None)
    refused = cli("set", "carol", "--email", "carol@example.com\r\nBcc: x@example.com")
    assert refused.returncode == 1 and "email" in refused.stderr
    assert "carol@example.com (verified)\t-" in cli("list").stdout  # unchanged
    assert cli("set", "nobody", "--email", "n@example.com").returncode == 1
    assert cli("set", "carol").returncode == 1  # nothing to set
    assert cli("create", "dave", "--email", "not an address").returncode == 1
    assert "dave" not in cli("list").stdout  # refused before anything was made


async def test_cli_contacts_sets_ones_own_pending_and_shows_the_state(api, live: str, capsys) -> None:
    from signoff.cli import main as cli

    def run(*args: str) -> tuple[int, str]:
        code = cli(["contacts", *args, "--api-url", live, "--api-key", api.users["alice"][1]])
        return code, capsys.readouterr().out

    code, out = await asyncio.to_thread(run, "--email", "alice-cli@example.com")
    assert code == 0 and "email: alice-cli@example.com (pending)" in out, out
    assert "does not send email" in out  # no SMTP here: nothing was sent, it stays pending
    await api.store.set_contacts(api.users["alice"][0], {"email": "alice-cli@example.com"}, verified=True)
    code, out = await asyncio.to_thread(run)
    assert code == 0 and "email: alice-cli@example.com (verified)" in out, out
    code, _ = await asyncio.to_thread(run, "confirm", "email")  # verified already: nothing to confirm
    assert code != 0
    code, out = await asyncio.to_thread(run, "--email", "")
    assert code == 0 and "email: -" in out
