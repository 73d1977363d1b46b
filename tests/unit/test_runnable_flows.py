"""The flows a person may run, one rule (engine.access.runnable_flows) read by every surface:
the API's flow list, the flows page, and Run Flow's lookup by name (their own, those shared with
them, SIGNOFF_FLOWS_DIR's; not another's unshared flow). The API and the pages on the in-memory
store (the store's part is the conformance suite's)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import httpx

from signoff.api.app import create_app
from signoff.api.flows_dir import public_owner_id
from signoff.engine.access import Access
from signoff.engine.settings import Settings
from signoff.engine.store.memory import MemoryStore


def spec(name: str) -> dict:
    return {"name": name, "nodes": [{"id": "a", "type": "ChatInput"}, {"id": "o", "type": "ChatOutput"}],
            "edges": [{"from": "a.message", "to": "o.input_value"}]}


async def test_the_api_the_flows_page_and_run_flow_agree_on_the_flows_a_person_may_run(tmp_path) -> None:
    store = MemoryStore()
    await store.setup()
    alice, bob = await store.create_user("alice"), await store.create_user("bob")
    key = await store.create_api_key(alice.id)
    public = await public_owner_id(store)
    own = await store.save_flow(alice.id, "own", spec("own"))
    shared = await store.save_flow(bob.id, "shared", spec("shared"))
    await store.grant_share(shared.id, alice.id, ["execute"])
    everyones = await store.save_flow(public, "everyones", spec("everyones"))
    hidden = await store.save_flow(bob.id, "hidden", spec("hidden"))
    runnable = {own.id, shared.id, everyones.id}

    app = create_app(Settings(home=tmp_path), store=store)
    app.state.public_owner_id = public  # as the lifespan finds it

    async def nothing_waits(user, flow_id=None):
        return []

    async def nothing_counted(user, **filters):
        return 0

    app.state.service = SimpleNamespace(pending_for=nothing_waits, inbox_count=nothing_counted,
                                        header_count=nothing_counted)  # the page's inbox count
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                                 headers={"x-api-key": key}) as api, \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as page:
        listed = {f["id"] for f in (await api.get("/api/v1/flows")).json()}
        token = re.search(r'name="token" value="([^"]+)"', (await page.get("/sign-in")).text).group(1)
        assert (await page.post("/sign-in", data={"token": token, "next": "/", "api_key": key})).status_code == 303
        shown = set(re.findall(r'action="/flows/([^"/]+)/runs"', (await page.get("/flows")).text))
        assert listed == shown == runnable
        for flow in (own, shared, everyones):
            assert (await api.get(f"/api/v1/flows/{flow.id}")).status_code == 200
        assert (await api.get(f"/api/v1/flows/{hidden.id}")).status_code == 404
    load = Access(store).flow_loader(alice.id)
    assert {(await load(name, by_name=True)).id for name in ("own", "shared", "everyones")} == runnable
    assert await load("hidden", by_name=True) is None
