"""`signoff users create NAME | revoke-key NAME | delete NAME` (talks to the database directly):
create a user and print its API key (shown once), revoke a user's keys, delete a user."""

from __future__ import annotations

import argparse
import asyncio
import sys

from signoff.engine.settings import Settings


def _open(settings: Settings):
    """The database these commands talk to, as the server opens it: SIGNOFF_HOME private first
    (a SQLite database made here holds API keys and every run's inputs)."""
    from signoff.engine.store import open_store
    from signoff.home import prepare_home

    prepare_home(settings.home)
    return open_store(settings.resolved_database_url)


async def _create(name: str) -> tuple[str, str, bool]:
    store = _open(Settings())
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


async def _revoke(name: str, key: str | None) -> int:
    from signoff.api.pages.session import end_all

    store = _open(Settings())
    try:
        await store.setup()
        user = await store.get_user_by_name(name)
        if user is None:
            raise LookupError(f"no user named {name!r}")
        if key is not None:
            owner = await store.user_for_api_key(key)
            if owner is None or owner.id != user.id:
                raise LookupError(f"{name} has no such key")
            revoked = int(await store.revoke_api_key(key))
        else:
            revoked = await store.revoke_api_keys(user.id)
        await end_all(store, user.id)  # a page session signed in with a revoked key ends with it
        return revoked
    finally:
        await store.close()


def _handle_revoke(args: argparse.Namespace) -> int:
    try:
        n = asyncio.run(_revoke(args.name, args.key))
    except LookupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"revoked {n} key(s) of {args.name}: requests with them now get 401", file=sys.stderr)
    return 0


async def _delete(name: str) -> bool:
    """Through the service, with Temporal: the user's runs are cancelled and their flows deleted
    (with every run of them) before their keys, shares and secrets go."""
    from signoff.service import RunService, connect_client

    settings = Settings()
    store = _open(settings)
    try:
        await store.setup()
        user = await store.get_user_by_name(name)
        if user is None:
            return False
        client = await connect_client(settings)
        await RunService(settings, store, client).delete_user(user)
        return True
    finally:
        await store.close()


def _handle_delete(args: argparse.Namespace) -> int:
    try:
        found = asyncio.run(_delete(args.name))
    except RuntimeError as e:  # Temporal is not reachable: nothing was deleted
        print(f"error: cannot reach Temporal to cancel the user's runs ({e}); start signoff and try again",
              file=sys.stderr)
        return 1
    if not found:
        print(f"error: no user named {args.name!r}", file=sys.stderr)
        return 1
    print(f"deleted {args.name}: runs cancelled, flows deleted, keys, shares and secrets removed", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("users", help="manage users and API keys (talks to the database directly)")
    sub = parser.add_subparsers(dest="users_command", metavar="SUBCOMMAND", required=True)
    create = sub.add_parser("create", help="create a user (or add a key to an existing one) and print its API key")
    create.add_argument("name", help="user name")
    create.set_defaults(handler=_handle_create)
    revoke = sub.add_parser("revoke-key", help="revoke a user's API keys (all, or --key KEY): they get 401 from now on")
    revoke.add_argument("name", help="user name")
    revoke.add_argument("--key", help="only this key")
    revoke.set_defaults(handler=_handle_revoke)
    delete = sub.add_parser("delete", help="delete a user: their runs cancelled, their flows deleted, keys, shares "
                                           "and secrets removed (needs Temporal)")
    delete.add_argument("name", help="user name")
    delete.set_defaults(handler=_handle_delete)
