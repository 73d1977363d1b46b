"""`signoff temporal setup`: register signoff's search attributes on an existing Temporal cluster."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from signoff.engine.settings import Settings


async def _setup(settings: Settings) -> list[str]:
    from signoff.devserver import ensure_search_attributes
    from signoff.service import connect_client

    client = await connect_client(settings)
    return await ensure_search_attributes(client, settings.temporal_namespace)


def _handle_setup(args: argparse.Namespace) -> int:
    from signoff.devserver import SEARCH_ATTRIBUTES

    overrides = {}
    if args.address:
        overrides["temporal_address"] = args.address
    if args.namespace:
        overrides["temporal_namespace"] = args.namespace
    settings = Settings(**overrides)
    added = asyncio.run(_setup(settings))
    where = f"{settings.effective_temporal_address} namespace {settings.temporal_namespace}"
    if added:
        print(f"Registered search attributes {', '.join(added)} on {where}")
    else:
        print(f"Search attributes {', '.join(SEARCH_ATTRIBUTES)} already registered on {where}")
    # Done: leave without the interpreter's teardown. A short-lived process with a Temporal client
    # can abort in it (SIGABRT, "PyGILState_Release: thread state ... must be current"), a thread
    # of the SDK's Rust core calling into a finalizing interpreter (temporalio/sdk-python#300);
    # the suite's TLS setup test met it once in 1,500 tests.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("temporal", help="Temporal cluster administration")
    sub = parser.add_subparsers(dest="temporal_command", metavar="COMMAND")
    setup = sub.add_parser("setup", help="register the Signoff* search attributes (Keyword) on the cluster")
    setup.add_argument("--address", help="host:port of the frontend (SIGNOFF_TEMPORAL_ADDRESS)")
    setup.add_argument("--namespace", help="namespace (SIGNOFF_TEMPORAL_NAMESPACE, default 'default')")
    setup.set_defaults(handler=_handle_setup)
    parser.set_defaults(handler=lambda args: (parser.print_help(), 2)[1])
