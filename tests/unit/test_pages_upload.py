"""Adding a flow from the flows page (a file or pasted JSON / YAML), read and checked as the
API's upload is (api/flowspec.read_flow): the same flow stored, the same problems refused. The
app on the in-memory store; a page needs a service only for its inbox count."""

from __future__ import annotations

import contextlib
import json
import re
from types import SimpleNamespace

import httpx

from signoff.api.app import create_app
from signoff.engine.settings import Settings
from signoff.engine.store.memory import MemoryStore

YAML = """name: pasted
nodes:
  - {id: a, type: ChatInput}
  - {id: o, type: ChatOutput}
edges:
  - {from: a.message, to: o.input_value}
"""


@contextlib.asynccontextmanager
async def signed_in(tmp_path, **settings):
    """alice, signed in to the pages (``page``, with the flows page's ``csrf``) and holding an API
    key (``api``), on an app over the in-memory store."""
    store = MemoryStore()
    await store.setup()
    user = await store.create_user("alice")
    key = await store.create_api_key(user.id)
    app = create_app(Settings(home=tmp_path, **settings), store=store)

    async def nothing_waits(user, flow_id=None):
        return []

    async def nothing_counted(user, **filters):
        return 0

    app.state.service = SimpleNamespace(pending_for=nothing_waits, inbox_count=nothing_counted,
                                        header_count=nothing_counted)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as page, \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                              headers={"x-api-key": key}) as api:
        token = re.search(r'name="token" value="([^"]+)"', (await page.get("/sign-in")).text).group(1)
        assert (await page.post("/sign-in", data={"token": token, "next": "/", "api_key": key})).status_code == 303
        csrf = re.search(r'name="csrf" value="([^"]+)"', (await page.get("/flows")).text).group(1)
        yield SimpleNamespace(store=store, user=user, app=app, page=page, api=api, csrf=csrf)


async def test_the_flows_page_adds_a_flow_as_the_api_does(tmp_path) -> None:
    async with signed_in(tmp_path) as s:
        store, user, page, api, csrf = s.store, s.user, s.page, s.api, s.csrf

        r = await page.post("/flows", data={"csrf": csrf, "spec": YAML})  # pasted YAML
        assert r.status_code == 303 and r.headers["location"].startswith("/flows?added=")
        as_file = json.dumps({"name": "filed", "nodes": [{"id": "a", "type": "ChatInput"}], "edges": []})
        r = await page.post("/flows", data={"csrf": csrf}, files={"file": ("f.json", as_file, "application/json")})
        assert r.status_code == 303
        via_api = (await api.post("/api/v1/flows", content=YAML, headers={"content-type": "application/yaml"})).json()
        stored = {f.name: f.spec for f in await store.list_flows(user.id)}
        assert stored["pasted"] == via_api["spec"] and set(stored) == {"pasted", "filed"}

        bad = {"name": "bad", "nodes": [{"id": "a", "type": "NoSuchComponent"}], "edges": []}
        r = await page.post("/flows", data={"csrf": csrf, "spec": json.dumps(bad)})
        refused = await api.post("/api/v1/flows", json=bad)
        assert r.status_code == refused.status_code == 422
        assert "NoSuchComponent" in r.text and "NoSuchComponent" in refused.text
        r = await page.post("/flows", data={"csrf": csrf, "spec": "  "})
        assert r.status_code == 422 and "Choose a file or paste a flow" in r.text


async def test_the_flows_page_refuses_a_flow_past_the_users_stored_bytes_as_the_api_does(tmp_path) -> None:
    async with signed_in(tmp_path, user_max_stored_bytes=400) as s:
        store, user, app, page, api, csrf = s.store, s.user, s.app, s.page, s.api, s.csrf
        r = await page.post("/flows", data={"csrf": csrf, "spec": YAML})
        assert r.status_code == 303  # within the budget
        kept = await store.stored_bytes(user.id)
        assert 0 < kept < 400
        app.state.settings.user_max_stored_bytes = kept + 10  # room for less than one more such flow
        r = await page.post("/flows", data={"csrf": csrf, "spec": YAML.replace("pasted", "again")})
        refused = await api.post("/api/v1/flows", content=YAML, headers={"content-type": "application/yaml"})
        assert r.status_code == refused.status_code == 409
        assert refused.json()["detail"]["code"] == "STORAGE_LIMIT"
        assert "SIGNOFF_USER_MAX_STORED_BYTES" in r.text and "again" in r.text  # the pasted flow shown again
        assert [f.name for f in await store.list_flows(user.id)] == ["pasted"]
        assert await store.stored_bytes(user.id) == kept
