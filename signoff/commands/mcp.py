"""`signoff mcp`: signoff as an MCP server over stdio, for an MCP client that starts it (Claude
Desktop, an IDE, an agent host), acting as the user SIGNOFF_API_KEY names. It talks to the
database and Temporal the API uses (SIGNOFF_DATABASE_URL or SIGNOFF_HOME, SIGNOFF_TEMPORAL_*):
api/mcp/stdio.py says why. A client elsewhere uses Streamable HTTP at /mcp instead."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys


def _mcp(args: argparse.Namespace) -> int:
    from signoff.engine.settings import Settings

    from signoff.api.mcp.stdio import serve

    key = (os.environ.get("SIGNOFF_API_KEY") or "").strip()
    if not key:
        print("error: set SIGNOFF_API_KEY to your API key (`signoff users create NAME` makes one)", file=sys.stderr)
        return 2
    # stdout is the protocol's: every log line goes to stderr
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    asyncio.run(serve(Settings(), key))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("mcp", help="serve MCP over stdio (for an MCP client; key from SIGNOFF_API_KEY)")
    parser.set_defaults(handler=_mcp)
