"""Writes per second per user (issue 28): SIGNOFF_WRITE_RATE with a burst of SIGNOFF_WRITE_BURST,
then 429 RATE_LIMITED with Retry-After; one user's flood does not limit another, and reads are
not writes. The bucket itself on a clock the test moves."""

from __future__ import annotations

import httpx

from signoff.api.app import create_app
from signoff.api.ratelimit import TokenBuckets
from signoff.engine.settings import Settings
from signoff.engine.store.memory import MemoryStore

FLOW = {"name": "f", "nodes": [{"id": "a", "type": "ChatInput"}, {"id": "o", "type": "ChatOutput"}],
        "edges": [{"from": "a.message", "to": "o.input_value"}]}


async def test_a_users_writes_beyond_the_burst_are_429_with_retry_after(tmp_path):
    store = MemoryStore()
    await store.setup()
    keys = {}
    for name in ("mallory", "alice"):
        user = await store.create_user(name)
        keys[name] = await store.create_api_key(user.id)
    app = create_app(Settings(home=tmp_path, write_rate=0.01, write_burst=3), store=store)

    def client(name: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                                 headers={"x-api-key": keys[name]})

    async with client("mallory") as c:
        for _ in range(3):
            assert (await c.post("/api/v1/flows", json=FLOW)).status_code == 201
        for write in (c.post("/api/v1/flows", json=FLOW), c.put("/api/v1/secrets/s", json={"value": "v"}),
                      c.post("/api/v2/workflows", json={"flow_id": "x"})):
            r = await write
            assert r.status_code == 429, r.text
            assert r.json()["detail"]["code"] == "RATE_LIMITED"
            assert int(r.headers["retry-after"]) >= 1
        assert (await c.get("/api/v1/flows")).status_code == 200  # reads are not writes
    async with client("alice") as c:  # per user
        assert (await c.post("/api/v1/flows", json=FLOW)).status_code == 201
    # and OpenAPI says so for every write
    schema = (await httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
              .get("/openapi.json")).json()
    submit = schema["paths"]["/api/v2/workflows"]["post"]["responses"]["429"]
    assert "RATE_LIMITED" in submit["description"] and "TOO_MANY_STREAMS" in submit["description"]
    assert "429" not in schema["paths"]["/api/v1/flows"]["get"]["responses"]


def test_a_bucket_refills_at_its_rate_up_to_its_burst():
    now = [0.0]
    buckets = TokenBuckets(2.0, 4, clock=lambda: now[0], max_keys=1)
    assert [buckets.take("u") for _ in range(4)] == [0, 0, 0, 0]
    assert buckets.take("u") == 0.5  # one token in half a second at 2 a second
    now[0] += 0.5
    assert buckets.take("u") == 0
    now[0] += 100
    assert [buckets.take("u") for _ in range(5)][-1] > 0  # refilled to the burst, no more
    assert buckets.take("v") == 0 and "u" in buckets._buckets  # u is not full: kept past max_keys
    assert TokenBuckets(0, 1).take("u") == 0  # 0: no limit


async def test_the_pages_forms_take_from_the_same_bucket(tmp_path):
    import re
    from types import SimpleNamespace

    store = MemoryStore()
    await store.setup()
    user = await store.create_user("mallory")
    key = await store.create_api_key(user.id)
    app = create_app(Settings(home=tmp_path, write_rate=0.01, write_burst=2), store=store)
    app.state.service = SimpleNamespace()  # a page needs one; a refused form never reaches it
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        token = re.search(r'name="token" value="([^"]+)"', (await c.get("/sign-in")).text).group(1)
        assert (await c.post("/sign-in", data={"token": token, "next": "/", "api_key": key})).status_code == 303
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                                     headers={"x-api-key": key}) as api:
            assert (await api.post("/api/v1/flows", json=FLOW)).status_code == 201
            assert (await api.post("/api/v1/flows", json=FLOW)).status_code == 201
        r = await c.post("/runs/j/stop", data={"csrf": "x"})  # the bucket is empty: refused before anything
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1


async def test_the_pages_and_the_api_say_when_to_try_again_alike(tmp_path):
    """Retry-After comes from one place (api/errors.retry_headers) for the JSON answers and the
    pages: a 503 (Temporal not connected: no service) and a 429 RATE_LIMITED."""
    import re
    from types import SimpleNamespace

    store = MemoryStore()
    await store.setup()
    user = await store.create_user("mallory")
    key = await store.create_api_key(user.id)
    app = create_app(Settings(home=tmp_path, write_rate=0.01, write_burst=1), store=store)  # no service
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as page, \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                              headers={"x-api-key": key}) as api:
        token = re.search(r'name="token" value="([^"]+)"', (await page.get("/sign-in")).text).group(1)
        assert (await page.post("/sign-in", data={"token": token, "next": "/", "api_key": key})).status_code == 303
        html, json_ = await page.get("/flows"), await api.get("/api/v2/workflows/pending")
        assert html.status_code == json_.status_code == 503
        assert html.headers["retry-after"] == json_.headers["retry-after"] == "2"
        assert html.headers["content-type"].startswith("text/html") and json_.json()["detail"]["code"] == "UNAVAILABLE"
        assert (await api.post("/api/v1/flows", json=FLOW)).status_code == 201  # the burst of one
        app.state.service = SimpleNamespace()  # a page needs one; a refused form never reaches it
        html, json_ = await page.post("/runs/j/stop", data={"csrf": "x"}), await api.post("/api/v1/flows", json=FLOW)
        assert html.status_code == json_.status_code == 429
        assert int(html.headers["retry-after"]) >= 1 and int(json_.headers["retry-after"]) >= 1


def test_the_service_budget_is_shared_evenly_by_the_users_who_write():
    """SIGNOFF_WRITE_RATE_TOTAL: alone, a user has the per-user rate; with more writers than the
    total gives that rate each, each has total / writers; a writer quiet for ACTIVE_SECONDS no
    longer counts. A user under their share is never refused: their bucket is theirs."""
    from signoff.api.ratelimit import WriteBudget

    now = [0.0]
    budget = WriteBudget(20.0, 2, 60.0, clock=lambda: now[0], active_seconds=10)
    assert budget.take("a") == 0 and budget.share() == 20  # 60 / 1, capped at the per-user 20
    for u in "bcdef":
        assert budget.take(u) == 0
    assert budget.share() == 10  # six writers: 60 / 6
    assert budget.take("a") == 0 and budget.take("a") == 0.1  # burst spent: a token in 1/10 s
    now[0] += 5
    for u in "ab":  # two keep writing, four go quiet
        budget.take(u)
    now[0] += 6
    assert budget.share() == 20  # 60 / 2 = 30, capped at 20
    assert WriteBudget(0, 2, 60.0).share() == 60  # no per-user limit: the whole budget for one
    assert WriteBudget(20.0, 2, 0).share() == 20  # no service budget: the per-user rate
    assert WriteBudget(0, 2, 0).take("a") == 0  # neither: no limit
