"""`signoff groups create NAME [USER...] | add NAME USER... | remove NAME USER... | list` (over
HTTP): your groups, which a Human Input names as approvers with ``"group:NAME"``."""

from __future__ import annotations

import argparse

from signoff.commands._client import add_client_options, emit, request, run_handler, seg


def _line(group: dict) -> str:
    members = ", ".join(m["name"] for m in group["members"]) or "(no members)"
    return f"{group['reference']}\t{members}"


def _create(args: argparse.Namespace) -> int:
    group = request(args, "POST", "/api/v1/groups", json={"name": args.name, "members": args.users})
    emit(args, group, _line(group))
    return 0


def _add(args: argparse.Namespace) -> int:
    group = request(args, "POST", f"/api/v1/groups/{seg(args.name)}/members", json={"users": args.users})
    emit(args, group, _line(group))
    return 0


def _remove(args: argparse.Namespace) -> int:
    group = None
    for user in args.users:
        group = request(args, "DELETE", f"/api/v1/groups/{seg(args.name)}/members/{seg(user)}")
    emit(args, group, _line(group) if group else "")
    return 0


def _list(args: argparse.Namespace) -> int:
    groups = request(args, "GET", "/api/v1/groups")
    emit(args, groups, "\n".join(_line(g) for g in groups) or "(no groups)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("groups", help="your groups of approvers (a Human Input's approvers: group:NAME)")
    sub = parser.add_subparsers(dest="groups_command", metavar="SUBCOMMAND", required=True)
    create = sub.add_parser("create", help="create a group, optionally with members")
    create.add_argument("name")
    create.add_argument("users", nargs="*", help="user names or ids")
    create.set_defaults(handler=run_handler(_create))
    add = sub.add_parser("add", help="add users to a group")
    add.add_argument("name")
    add.add_argument("users", nargs="+", help="user names or ids")
    add.set_defaults(handler=run_handler(_add))
    remove = sub.add_parser("remove", help="remove users from a group")
    remove.add_argument("name")
    remove.add_argument("users", nargs="+", help="user names or ids")
    remove.set_defaults(handler=run_handler(_remove))
    lst = sub.add_parser("list", help="your groups and their members")
    lst.set_defaults(handler=run_handler(_list))
    for p in (create, add, remove, lst):
        add_client_options(p)
