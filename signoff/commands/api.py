"""`signoff api`: serve the HTTP API (a real Temporal via SIGNOFF_TEMPORAL_ADDRESS, any database)."""

from __future__ import annotations

import argparse

from signoff.engine.settings import Settings


def _handle(args: argparse.Namespace) -> int:
    import uvicorn

    from signoff.api.app import create_app
    from signoff.home import prepare_home

    overrides = {}
    if args.host:
        overrides["api_host"] = args.host
    if args.port is not None:
        overrides["api_port"] = args.port
    settings = Settings(**overrides)
    prepare_home(settings.home)  # a secrets key file, a SQLite database may live there
    from signoff.engine.tracing import sdk as telemetry

    telemetry.install(settings, service_name="signoff-api")  # OTLP export of Temporal's client spans
    app = create_app(settings)
    print(f"signoff API on http://{settings.api_host}:{settings.api_port} (docs at /docs)", flush=True)
    uvicorn.run(app, host=settings.api_host, port=settings.api_port, log_level=args.log_level,
                proxy_headers=False)  # the app believes SIGNOFF_TRUSTED_PROXIES (api/app.py)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("api", help="serve the HTTP API (one replica; run as many as you like)")
    parser.add_argument("--host", help="bind address (SIGNOFF_API_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (SIGNOFF_API_PORT, default 8000)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(handler=_handle)
