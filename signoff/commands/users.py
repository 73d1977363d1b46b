"""`signoff users create NAME`: create a user and print its API key (shown once)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from signoff.engine.settings import Settings


async def _create(name: str) -> tuple[str, str, bool]:
    from signoff.engine.store import open_store

    settings = Settings()
    store = open_store(settings.resolved_database_url)
    try:
        await store.setup()
        user = await store.get_user_by_name(name)
        existed = user is not None
        if user is None:
            user = await store.create_user(name)
        key = await store.create_api_key(user.id)
        return user.id, key, existed
    finally:
        await store.close()


def _handle_create(args: argparse.Namespace) -> int:
    name = args.name.strip()
    if not name or len(name) > 200:
        print("error: a user name is 1 to 200 characters", file=sys.stderr)
        return 1
    user_id, key, existed = asyncio.run(_create(name))
    note = " (existing user: a new key was added)" if existed else ""
    print(f"User {name} ({user_id}){note}", file=sys.stderr)
    print("API key (shown once; keep it):", file=sys.stderr)
    print(key)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("users", help="manage users and API keys (talks to the database directly)")
    sub = parser.add_subparsers(dest="users_command", metavar="SUBCOMMAND", required=True)
    create = sub.add_parser("create", help="create a user (or add a key to an existing one) and print its API key")
    create.add_argument("name", help="user name")
    create.set_defaults(handler=_handle_create)
