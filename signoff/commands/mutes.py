"""`signoff mutes add USER... | remove USER... | list` (over HTTP): requesters whose requests no
longer reach your inbox, pending list or webhooks (docs/security.md, "Fan-out and approvers")."""

from __future__ import annotations

import argparse

from signoff.commands._client import add_client_options, emit, request, run_handler, seg


def _add(args: argparse.Namespace) -> int:
    muted = [request(args, "PUT", f"/api/v1/users/me/mutes/{seg(user)}") for user in args.users]
    emit(args, muted, "\n".join(f"muted {m['name']}" for m in muted))
    return 0


def _remove(args: argparse.Namespace) -> int:
    for user in args.users:
        request(args, "DELETE", f"/api/v1/users/me/mutes/{seg(user)}")
    emit(args, {"unmuted": args.users}, "\n".join(f"unmuted {u}" for u in args.users))
    return 0


def _list(args: argparse.Namespace) -> int:
    muted = request(args, "GET", "/api/v1/users/me/mutes")
    emit(args, muted, "\n".join(m["name"] for m in muted) or "(nobody muted)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("mutes", help="requesters whose requests no longer reach you (inbox, webhooks)")
    sub = parser.add_subparsers(dest="mutes_command", metavar="SUBCOMMAND", required=True)
    add = sub.add_parser("add", help="mute requesters")
    add.add_argument("users", nargs="+", help="user names or ids")
    add.set_defaults(handler=run_handler(_add))
    remove = sub.add_parser("remove", help="unmute requesters")
    remove.add_argument("users", nargs="+", help="user names or ids")
    remove.set_defaults(handler=run_handler(_remove))
    lst = sub.add_parser("list", help="the requesters you muted")
    lst.set_defaults(handler=run_handler(_list))
    for p in (add, remove, lst):
        add_client_options(p)
