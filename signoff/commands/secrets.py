"""`signoff secrets set NAME | list | delete NAME` (over HTTP): named credentials a flow references
as {"$secret": "NAME"}; a value is read from stdin (or a prompt), encrypted, never shown again."""

from __future__ import annotations

import argparse
import getpass
import sys

from signoff.commands._client import CommandError, add_client_options, emit, request, run_handler, seg


def _read_value(args: argparse.Namespace) -> str:
    if sys.stdin.isatty():
        value = getpass.getpass(f"value of {args.name} (not echoed): ")
    else:
        value = sys.stdin.read()
        value = value[:-1] if value.endswith("\n") else value
    if not value:
        raise CommandError("The value is empty: give it on stdin, e.g. `printenv STRIPE_KEY | signoff secrets set stripe`")
    return value


def _set(args: argparse.Namespace) -> int:
    secret = request(args, "PUT", f"/api/v1/secrets/{seg(args.name)}", json={"value": _read_value(args)})
    emit(args, secret, f"secret {secret['name']} stored; reference it as {{\"$secret\": \"{secret['name']}\"}}")
    return 0


def _list(args: argparse.Namespace) -> int:
    secrets = request(args, "GET", "/api/v1/secrets")
    emit(args, secrets, "\n".join(f"{s['name']}\tupdated {s['updated_at']}" for s in secrets) or "(no secrets)")
    return 0


def _delete(args: argparse.Namespace) -> int:
    request(args, "DELETE", f"/api/v1/secrets/{seg(args.name)}")
    emit(args, None, f"secret {args.name} deleted")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("secrets", help="store the credentials your flows reference by name")
    sub = parser.add_subparsers(dest="secrets_command", metavar="SUBCOMMAND", required=True)
    put = sub.add_parser("set", help="create or replace a secret; the value is read from stdin (or a prompt)")
    put.add_argument("name")
    put.set_defaults(handler=run_handler(_set))
    lst = sub.add_parser("list", help="your secrets' names (never their values)")
    lst.set_defaults(handler=run_handler(_list))
    delete = sub.add_parser("delete", help="delete a secret")
    delete.add_argument("name")
    delete.set_defaults(handler=run_handler(_delete))
    for p in (put, lst, delete):
        add_client_options(p)
