"""The person's pages under load (issues 12 and 29): the inbox with many waiting requests, a bulk
decision against one at a time, and the API process with many open live pages. Prints JSON.

A real signoff: the Temporal dev server, a worker (``signoff worker``) and the API
(``signoff api``) in their own processes, as under a deployment. Measured in the same run:

(a) the inbox of a person with ``--waiting`` (default 10,000) requests waiting, against one with
    ``--small`` (10): the time of ``GET /`` as a client on the same host sees it (median of
    ``--reps``; the page's own work, the HTTP round trip on the loopback around it), and the
    first contentful paint in Chromium (Playwright, Debian's ``/usr/bin/chromium``;
    ``performance.getEntriesByType('paint')``, median of ``--paints``). The waiting requests are
    written to the store as a pause writes them (the job, ``suspended`` with its pending request
    and its ``human_input_required`` event, by the store's own methods): the inbox reads nothing
    else, and 10,000 runs through Temporal would take the box most of an hour. On PostgreSQL the
    bench then runs ``ANALYZE jobs``, as autovacuum would within a minute of such a change;
(b) ``--decide`` (100) requests decided by one ``POST /api/v2/workflows/resume-batch`` against the
    same number decided by ``POST /resume`` one after the other (and 8 at a time), each set of
    runs really suspended through Temporal: the wall time until the last answer, and the ratio;
(c) the API process's CPU time (``/proc/PID/stat`` utime+stime) and RSS (``/proc/PID/status``
    VmRSS) over ``--seconds`` (30) with ``--pages`` (100) live pages held open by a client:
    half inbox streams (``/inbox/live``) and half run pages (``/runs/{job}/live``) of the person
    with 10 waiting, then all of them inbox streams of the person with many waiting; against
    the same process idle for the same time (``--pages 0``: not measured).

The API runs with SIGNOFF_WRITE_RATE=0: 100 resumes in a row are past the default budget, which
is not what is measured here.

Usage: python bench/pages.py [--waiting 10000] [--decide 100] [--pages 100] [--seconds 30]
       [--database-url postgresql://...]   (default: a SQLite file in a temp folder)
Takes ~5 minutes on the 2-core box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.suspended import rss_mb, suspend  # noqa: E402
from signoff.engine.models import JobStatus, NewJob, Option, PendingRequest, utcnow  # noqa: E402
from bench.overhead import GATE_FLOW  # noqa: E402
from bench._proc import cpu_seconds  # noqa: E402
from signoff.devserver import DevServer, free_port  # noqa: E402
from signoff.engine.settings import Settings  # noqa: E402
from signoff.engine.store import open_store  # noqa: E402
from signoff.service import RunService, with_converter  # noqa: E402

CHROMIUM = os.environ.get("SIGNOFF_TEST_CHROMIUM", "/usr/bin/chromium")


def start_api(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "signoff.cli", "api", "--log-level", "warning"], env=env,
                            cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"signoff api exited, see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("signoff api never became healthy")
        time.sleep(0.1)


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def seed_waiting(store, user, flow, n: int, concurrency: int = 16) -> list[str]:
    """``n`` requests waiting for ``user``, written as a run's pause writes them (the store's
    own methods: the job, ``in_progress``, then ``suspended`` with its pending request and the
    ``human_input_required`` event), a second apart, newest last; their job ids."""
    sem = asyncio.Semaphore(concurrency)
    start = utcnow() - timedelta(seconds=n)
    session = uuid.uuid4().hex[:8]

    async def one(i: int) -> str:
        async with sem:
            job_id = str(uuid.uuid4())
            await store.create_job(NewJob(job_id=job_id, flow_id=flow.id, flow_version=flow.version, user_id=user.id,
                                          session_id=f"{session}-{i}", request={"input_value": f"refund {i}",
                                                                                "tweaks": {}, "mode": "background",
                                                                                "session_id": f"{session}-{i}"}))
            await store.set_status(job_id, JobStatus.in_progress)
            pending = PendingRequest(
                request_id=f"gate:{job_id}", prompt=f"Approve the refund for order {i}?",
                options=[Option(action_id="approve", label="Approve"), Option(action_id="reject", label="Reject")],
                allowed_decisions=["approve", "reject"], paused_at=start + timedelta(seconds=i))
            await store.mark_suspended(job_id, pending, event=("human_input_required", pending.model_dump(mode="json")))
            return job_id

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def decide(url: str, key: str, jobs: list, how: str) -> dict:
    """Approve each of ``jobs`` (suspended): ``batch`` in one resume-batch call, ``one`` by one
    resume after the other, ``eight`` by resumes 8 at a time; the wall time to the last answer."""
    async with httpx.AsyncClient(base_url=url, headers={"x-api-key": key}, timeout=300) as c:
        def body(job) -> dict:
            return {"request_id": job.pending.request_id, "decision": {"action_id": "approve"}}

        t = time.perf_counter()
        if how == "batch":
            r = await c.post("/api/v2/workflows/resume-batch",
                             json={"items": [{"job_id": j.job_id, **body(j)} for j in jobs]})
            assert r.status_code == 200, r.text
            codes = [x["status_code"] for x in r.json()["results"]]
        else:
            sem = asyncio.Semaphore(1 if how == "one" else 8)

            async def one(job) -> int:
                async with sem:
                    return (await c.post(f"/api/v2/workflows/{job.job_id}/resume", json=body(job))).status_code

            codes = list(await asyncio.gather(*(one(j) for j in jobs)))
        seconds = time.perf_counter() - t
    assert codes == [200] * len(jobs), codes
    return {"seconds": round(seconds, 2), "decisions_per_second": round(len(jobs) / seconds, 1)}


async def sign_in(browser, url: str, key: str):
    """A browser context signed in through the sign-in page; its session cookie."""
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(url + "/sign-in")
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(url + "/")
    await page.close()
    cookie = next(c for c in await context.cookies() if c["name"] == "signoff_session")
    return context, {"signoff_session": cookie["value"]}


VARIANTS = ("/?sort=oldest", "/?sort=deadline", "/?q=order+7", "/?group=flow")


async def inbox_figures(url: str, context, cookies: dict[str, str], reps: int, paints: int) -> dict:
    async with httpx.AsyncClient(base_url=url, cookies=cookies, timeout=60) as c:
        r = await c.get("/")
        assert r.status_code == 200, r.status_code
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            r = await c.get("/")
            times.append(time.perf_counter() - t)
            assert r.status_code == 200
        title = r.text.split("<title>", 1)[1].split("</title>", 1)[0]
        # the inbox's other orders (issue 29): age reads a page off the index the other way; the
        # deadline order and a search read the first 1,000 waiting (api/pages/inbox.py: SCAN)
        variants = {}
        for path in VARIANTS:
            spent = []
            for _ in range(max(3, reps // 4)):
                t = time.perf_counter()
                r = await c.get(path)
                spent.append(time.perf_counter() - t)
                assert r.status_code == 200, (path, r.status_code)
            variants[path] = round(statistics.median(spent) * 1000, 1)
    fcp = []
    for _ in range(paints):
        page = await context.new_page()
        await page.goto(url + "/", wait_until="load")
        value = await page.evaluate("""() => new Promise(done => {
            const get = () => (performance.getEntriesByType('paint')
                .find(e => e.name === 'first-contentful-paint') || {}).startTime;
            const v = get();
            if (v !== undefined) return done(v);
            setTimeout(() => done(get() ?? null), 1000);
        })""")
        await page.close()
        if value is not None:
            fcp.append(value)
    return {"title": title, "get_ms_median": round(statistics.median(times) * 1000, 1), "variants_ms_median": variants,
            "get_ms_min": round(min(times) * 1000, 1), "get_reps": reps,
            "first_contentful_paint_ms_median": round(statistics.median(fcp), 1) if fcp else None,
            "paints": len(fcp)}


async def interleaved(url: str, small: dict[str, str], many: dict[str, str], reps: int) -> dict:
    """``GET /`` of the two inboxes in turns (small, many, small, many ...): each pair meets the
    same moment of a noisy machine, so the ratio of the medians (and the median of the pairs'
    ratios) holds where two runs one after the other do not."""
    async with httpx.AsyncClient(base_url=url, cookies=small, timeout=60) as a, \
            httpx.AsyncClient(base_url=url, cookies=many, timeout=60) as b:
        for c in (a, b):
            assert (await c.get("/")).status_code == 200
        pairs = []
        for _ in range(reps):
            spent = []
            for c in (a, b):
                t = time.perf_counter()
                r = await c.get("/")
                spent.append(time.perf_counter() - t)
                assert r.status_code == 200
            pairs.append(spent)
    small_ms = statistics.median(p[0] for p in pairs) * 1000
    many_ms = statistics.median(p[1] for p in pairs) * 1000
    return {"reps": reps, "small_ms_median": round(small_ms, 1), "many_ms_median": round(many_ms, 1),
            "ratio_of_medians": round(many_ms / small_ms, 2),
            "median_of_pair_ratios": round(statistics.median(p[1] / p[0] for p in pairs), 2)}


async def hold(url: str, cookies: dict[str, str], paths: list[str], seconds: float, pid: int) -> dict:
    """Hold one SSE stream per path open for ``seconds``, reading all it sends; the API
    process's CPU over that time and its RSS at the end."""
    got = {"bytes": 0, "open": 0}
    limits = httpx.Limits(max_connections=len(paths) + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, cookies=cookies, limits=limits,
                                 timeout=httpx.Timeout(10, read=None)) as c:
        async def one(path: str) -> None:
            async with c.stream("GET", path) as r:
                assert r.status_code == 200, (path, r.status_code)
                got["open"] += 1
                async for chunk in r.aiter_bytes():
                    got["bytes"] += len(chunk)

        tasks = [asyncio.create_task(one(p)) for p in paths]
        deadline = time.monotonic() + 30
        while got["open"] < len(paths):
            if any(t.done() for t in tasks):
                for t in tasks:
                    if t.done():
                        t.result()
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {got['open']} of {len(paths)} streams opened")
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.0)  # the first snapshots sent
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(seconds)
        cpu = cpu_seconds(pid) - cpu0
        wall = time.monotonic() - t0
        rss = rss_mb(pid)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"streams": len(paths), "cpu_seconds": round(cpu, 2), "cpu_percent": round(100 * cpu / wall, 1),
            "rss_mb": rss, "bytes_received": got["bytes"]}


async def idle(pid: int, seconds: float) -> dict:
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall = cpu_seconds(pid) - cpu0, time.monotonic() - t0
    return {"cpu_seconds": round(cpu, 2), "cpu_percent": round(100 * cpu / wall, 1), "rss_mb": rss_mb(pid)}


async def main() -> None:
    from playwright.async_api import async_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument("--waiting", type=int, default=10_000)
    ap.add_argument("--decide", type=int, default=100, help="requests decided by a batch, and one by one")
    ap.add_argument("--small", type=int, default=10)
    ap.add_argument("--reps", type=int, default=20, help="GET / timed, per inbox")
    ap.add_argument("--paints", type=int, default=5, help="page loads in Chromium, per inbox")
    ap.add_argument("--pages", type=int, default=100, help="live pages held open (0: not measured)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--concurrency", type=int, default=32, help="submissions in flight")
    ap.add_argument("--database-url", default=None)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-pages-"))
    server = DevServer(port=free_port(), ui_port=None, db_file=None, log_file=tmp / "temporal.log")
    server.start()
    worker = api = None
    started = time.perf_counter()
    try:
        client = with_converter(await server.wait_healthy())
        settings = Settings(home=tmp, database_url=args.database_url or f"sqlite:///{tmp / 'bench.db'}",
                            temporal_address=server.address, task_queue=f"bench-{uuid.uuid4()}",
                            user_max_runs_in_flight=0)
        store = open_store(settings.resolved_database_url)
        await store.setup()
        port = free_port()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
               "SIGNOFF_HOME": str(tmp), "SIGNOFF_DATABASE_URL": settings.resolved_database_url,
               "SIGNOFF_TEMPORAL_ADDRESS": server.address, "SIGNOFF_TASK_QUEUE": settings.task_queue,
               "SIGNOFF_API_PORT": str(port), "PYTHONPATH": str(ROOT), "SIGNOFF_WRITE_RATE": "0",
               "SIGNOFF_USER_MAX_RUNS_IN_FLIGHT": "0"}
        worker = subprocess.Popen([sys.executable, "-m", "signoff.cli", "worker"], cwd=ROOT, env=env,
                                  stdout=open(tmp / "worker.log", "ab"), stderr=subprocess.STDOUT)
        api = start_api(env, port, tmp / "api.log")
        url = f"http://127.0.0.1:{port}"

        service = RunService(settings, store, client)
        small_user = await store.create_user(f"bench-small-{uuid.uuid4().hex[:6]}")
        many_user = await store.create_user(f"bench-many-{uuid.uuid4().hex[:6]}")
        small_key, many_key = (await store.create_api_key(small_user.id), await store.create_api_key(many_user.id))
        small_flow = await store.save_flow(small_user.id, "Refund approval", GATE_FLOW)
        many_flow = await store.save_flow(many_user.id, "Refund approval", GATE_FLOW)
        t = time.perf_counter()
        small_jobs = await seed_waiting(store, small_user, small_flow, args.small)
        await seed_waiting(store, many_user, many_flow, args.waiting)
        seed_seconds = time.perf_counter() - t
        if settings.resolved_database_url.startswith("postgres"):
            # what autovacuum does within a minute of a change this size: the planner's statistics
            async with store._tx(write=True) as tx:
                await tx.execute("ANALYZE jobs")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM)
            small_ctx, small_cookies = await sign_in(browser, url, small_key)
            many_ctx, many_cookies = await sign_in(browser, url, many_key)
            inbox_small = await inbox_figures(url, small_ctx, small_cookies, args.reps, args.paints)
            inbox_many = await inbox_figures(url, many_ctx, many_cookies, args.reps, args.paints)
            await browser.close()
        turns = await interleaved(url, small_cookies, many_cookies, max(args.reps, 40))

        decider = await store.create_user(f"bench-decider-{uuid.uuid4().hex[:6]}")
        decider_key = await store.create_api_key(decider.id)
        decider_flow = await store.save_flow(decider.id, "Refund approval", GATE_FLOW)
        decisions: dict = {}
        if args.decide:
            t = time.perf_counter()
            sets = [await suspend(service, store, decider, decider_flow, args.decide, args.concurrency)
                    for _ in range(3)]
            decisions["suspend_seconds"] = round(time.perf_counter() - t, 1)
            for how, jobs in zip(("one", "batch", "eight"), sets):
                decisions[how] = await decide(url, decider_key, jobs, how)
            decisions["ratio_batch_to_one_by_one"] = round(decisions["batch"]["seconds"] / decisions["one"]["seconds"], 2)
            decisions["ratio_batch_to_eight_at_a_time"] = round(decisions["batch"]["seconds"]
                                                                / decisions["eight"]["seconds"], 2)

        api_process: dict = {}
        if args.pages:
            await asyncio.sleep(2.0)
            rss_idle_before = rss_mb(api.pid)
            quiet = await idle(api.pid, args.seconds)
            half = args.pages // 2
            since = "&since=" + quote((datetime.now(timezone.utc) - timedelta(seconds=5)).isoformat())  # as the page
            mixed = [f"/inbox/live?rows=1{since}" for _ in range(half)] + \
                [f"/runs/{small_jobs[i % len(small_jobs)]}/live?seq=0&status=suspended"
                 for i in range(args.pages - half)]
            live_mixed = await hold(url, small_cookies, mixed, args.seconds, api.pid)
            live_many = await hold(url, many_cookies, [f"/inbox/live?rows=1{since}"] * args.pages, args.seconds,
                                   api.pid)
            await asyncio.sleep(2.0)
            api_process = {
                "seconds_each": args.seconds,
                "idle": {**quiet, "rss_mb_before": rss_idle_before},
                f"{args.pages}_live_pages_{half}_inbox_{args.pages - half}_run_{args.small}_waiting": live_mixed,
                f"{args.pages}_live_inboxes_{args.waiting}_waiting": live_many,
                "rss_mb_after_streams_closed": rss_mb(api.pid),
            }

        out = {
            "database": settings.resolved_database_url.split(":", 1)[0],
            "seed_seconds": round(seed_seconds, 1),
            "inbox": {
                f"{args.small}_waiting": inbox_small,
                f"{args.waiting}_waiting": inbox_many,
                "ratio_get_median": round(inbox_many["get_ms_median"] / inbox_small["get_ms_median"], 2),
                "interleaved": turns,  # the figure to quote on a noisy machine
                "ratio_fcp_median": round(inbox_many["first_contentful_paint_ms_median"]
                                          / inbox_small["first_contentful_paint_ms_median"], 2)
                if inbox_many["first_contentful_paint_ms_median"] and inbox_small["first_contentful_paint_ms_median"]
                else None,
                "ratio_variants_get_median": {path: round(inbox_many["variants_ms_median"][path]
                                                          / inbox_small["variants_ms_median"][path], 2)
                                              for path in VARIANTS},
            },
            "decisions": decisions,
            "api_process": api_process,
            "wall_seconds": round(time.perf_counter() - started, 1),
        }
        await store.close()
        print(json.dumps(out, indent=2))
    finally:
        stop(api)
        stop(worker)
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
