"""`signoff users create NAME | set NAME | list | revoke-key NAME | delete NAME` (talks to the
database directly): create a user and print its API key (shown once), set a user's contacts
(``--email``, ``--slack``: where requests reach them, DESIGN §14; verified: the operator vouches,
where one a person sets for themselves is pending until confirmed), list the users, revoke a
user's keys, delete a user.

They open the database the server opens: SIGNOFF_DATABASE_URL, else the SQLite file in
SIGNOFF_HOME (./.signoff). Run in another folder, that default would be a new, empty database
that no running signoff reads, and a key made there would be refused: so without
SIGNOFF_DATABASE_URL they refuse a home with no database (``create --new-database`` makes one),
and a database other than the one the ``signoff dev`` running on that home uses."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

from signoff.engine.settings import Settings
from signoff.home import running_dev

if TYPE_CHECKING:
    from signoff.engine.models import User  # the engine's models: imported when a command reads a user


class WrongDatabase(Exception):
    """The database these commands would open is not the server's; the message says what to do."""


def _check_database(settings: Settings, *, may_create: bool = False) -> None:
    dev = running_dev(settings.home)
    url = settings.resolved_database_url
    if dev is not None and dev["database_url"] != url:
        raise WrongDatabase(f"the `signoff dev` running on {settings.home.resolve()} uses {dev['database_url']}, "
                            f"not {url}: unset SIGNOFF_DATABASE_URL, or set it to that database")
    if settings.database_url is None and not (settings.home / "signoff.db").exists() and not may_create:
        raise WrongDatabase(f"no signoff database in {settings.home.resolve()}: run this in the folder where "
                            "`signoff dev` runs, or set SIGNOFF_HOME or SIGNOFF_DATABASE_URL to the server's "
                            "(`users create --new-database` makes a new, empty one here)")


def _open(settings: Settings, *, may_create: bool = False):
    """The database these commands talk to, as the server opens it (refused as _check_database
    says): SIGNOFF_HOME private first (a SQLite database made here holds API keys and every run's
    inputs)."""
    from signoff.engine.store import open_store
    from signoff.home import prepare_home

    _check_database(settings, may_create=may_create)
    prepare_home(settings.home)
    return open_store(settings.resolved_database_url)


def _contacts(args: argparse.Namespace) -> dict[str, str | None]:
    """The contacts the command sets (``--email ""`` clears one), checked (InvalidContact)."""
    from signoff.engine.contacts import checked

    given = {k: getattr(args, k) for k in ("email", "slack") if getattr(args, k, None) is not None}
    return checked(given)


async def _create(name: str, new_database: bool, contacts: dict[str, str | None]) -> tuple[str, str, bool]:
    store = _open(Settings(), may_create=new_database)
    try:
        await store.setup()
        user = await store.get_user_by_name(name)
        existed = user is not None
        if user is None:
            user = await store.create_user(name)
        if contacts:
            from signoff.engine.store.base import StoreConflict

            try:
                await store.set_contacts(user.id, contacts, verified=True)  # the operator vouches
            except StoreConflict:
                raise LookupError("that Slack user id is another user's (a Slack id is one user's)") from None
        key = await store.create_api_key(user.id)
        return user.id, key, existed
    finally:
        await store.close()


def _handle_create(args: argparse.Namespace) -> int:
    from signoff.engine.errors import InvalidContact

    name = args.name.strip()
    if not name or len(name) > 200:
        print("error: a user name is 1 to 200 characters", file=sys.stderr)
        return 1
    try:
        user_id, key, existed = asyncio.run(_create(name, args.new_database, _contacts(args)))
    except (WrongDatabase, InvalidContact, LookupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
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
    except (LookupError, WrongDatabase) as e:
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
    except WrongDatabase as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:  # Temporal is not reachable: nothing was deleted
        print(f"error: cannot reach Temporal to cancel the user's runs ({e}); start signoff and try again",
              file=sys.stderr)
        return 1
    if not found:
        print(f"error: no user named {args.name!r}", file=sys.stderr)
        return 1
    print(f"deleted {args.name}: runs cancelled, flows deleted, keys, shares and secrets removed", file=sys.stderr)
    return 0


async def _set(name: str, contacts: dict[str, str | None]) -> User:
    from signoff.engine.store.base import StoreConflict

    store = _open(Settings())
    try:
        await store.setup()
        user = await store.get_user_by_name(name)
        try:
            # the operator vouches: verified (a pending one set again to the same value becomes verified)
            changed = await store.set_contacts(user.id, contacts, verified=True) if user is not None else None
        except StoreConflict:
            raise LookupError("that Slack user id is another user's (a Slack id is one user's)") from None
        if changed is None:
            raise LookupError(f"no user named {name!r}")
        return changed
    finally:
        await store.close()


def _handle_set(args: argparse.Namespace) -> int:
    from signoff.engine.errors import InvalidContact

    try:
        contacts = _contacts(args)
        if not contacts:
            print("error: say what to set: --email ADDR and/or --slack UID ('' clears one)", file=sys.stderr)
            return 1
        user = asyncio.run(_set(args.name, contacts))
    except (LookupError, WrongDatabase, InvalidContact) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{user.name}: email {_shown(user, 'email')}, slack {_shown(user, 'slack')}", file=sys.stderr)
    return 0


def _shown(user: User, channel: str) -> str:
    """A contact and its state: ``bob@example.com (verified)``, ``U024BE7LH (pending)``, ``-``."""
    value = getattr(user, channel)
    return f"{value} ({user.contact_state(channel)})" if value else "-"


async def _list() -> list[User]:
    store = _open(Settings())
    try:
        await store.setup()
        return await store.list_users()
    finally:
        await store.close()


def _handle_list(args: argparse.Namespace) -> int:
    try:
        users = asyncio.run(_list())
    except WrongDatabase as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([{**u.model_dump(mode="json"), "email_state": u.contact_state("email"),
                            "slack_state": u.contact_state("slack")} for u in users], indent=2))
    else:
        for u in users:
            print(f"{u.name}\t{u.id}\t{u.created_at:%Y-%m-%d %H:%M} UTC\t{_shown(u, 'email')}\t{_shown(u, 'slack')}")
        if not users:
            print("(no users)", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("users", help="manage users and API keys (talks to the database directly)")
    sub = parser.add_subparsers(dest="users_command", metavar="SUBCOMMAND", required=True)
    create = sub.add_parser("create", help="create a user (or add a key to an existing one) and print its API key")
    create.add_argument("name", help="user name")
    create.add_argument("--new-database", action="store_true",
                        help="make the database when SIGNOFF_HOME has none yet (a first user before the first start)")
    for p in (create, set_ := sub.add_parser("set", help="set a user's contacts: where requests reach them")):
        p.add_argument("--email", help="their email address (requests by email; '' clears it)")
        p.add_argument("--slack", help="their Slack user id, e.g. U024BE7LH (requests in Slack; '' clears it)")
    create.set_defaults(handler=_handle_create)
    set_.add_argument("name", help="user name")
    set_.set_defaults(handler=_handle_set)
    listed = sub.add_parser("list", help="list the users: name, id, when created, email, Slack id (each verified or "
                                         "pending)")
    listed.add_argument("--json", action="store_true", help="print JSON")
    listed.set_defaults(handler=_handle_list)
    revoke = sub.add_parser("revoke-key", help="revoke a user's API keys (all, or --key KEY): they get 401 from now on")
    revoke.add_argument("name", help="user name")
    revoke.add_argument("--key", help="only this key")
    revoke.set_defaults(handler=_handle_revoke)
    delete = sub.add_parser("delete", help="delete a user: their runs cancelled, their flows deleted, keys, shares "
                                           "and secrets removed (needs Temporal)")
    delete.add_argument("name", help="user name")
    delete.set_defaults(handler=_handle_delete)
