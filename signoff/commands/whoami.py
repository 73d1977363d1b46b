"""`signoff whoami` (over HTTP): who the API key is, and the bytes you keep in signoff against
your budget (SIGNOFF_USER_MAX_STORED_BYTES; docs/security.md, "Budgets per user: stored bytes")."""

from __future__ import annotations

import argparse

from signoff.commands._client import add_client_options, emit, request, run_handler


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _whoami(args: argparse.Namespace) -> int:
    me = request(args, "GET", "/api/v1/users/me")
    limit = me["max_stored_bytes"]
    budget = f"of {_size(limit)} ({100 * me['stored_bytes'] / limit:.0f}%)" if limit else "(no limit)"
    contacts = "".join(f"\n{k}: {me[k]} ({me.get(k + '_state')})" for k in ("email", "slack") if me.get(k))
    emit(args, me, f"{me['name']} ({me['id']})\nstored: {_size(me['stored_bytes'])} {budget}{contacts}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("whoami", help="who your API key is, and the bytes you keep in signoff")
    parser.set_defaults(handler=run_handler(_whoami))
    add_client_options(parser)
