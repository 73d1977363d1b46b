"""`signoff flows add FILE | list | share FLOW USER | revoke FLOW USER` (over HTTP)."""

from __future__ import annotations

import argparse
from pathlib import Path

from signoff.commands._client import CommandError, add_client_options, emit, request, run_handler


def _add(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise CommandError(f"No such file: {path}")
    ctype = "application/yaml" if path.suffix.lower() in (".yaml", ".yml") else "application/json"
    try:
        flow = request(args, "POST", "/api/v1/flows", content=path.read_bytes(), headers={"content-type": ctype})
    except CommandError as e:
        raise CommandError(f"{path}: {e}") from None
    emit(args, flow, f"{flow['id']}\t{flow['name']} (version {flow['version']})")
    return 0


def _list(args: argparse.Namespace) -> int:
    flows = request(args, "GET", "/api/v1/flows")
    emit(args, flows, "\n".join(f"{f['id']}\t{f['name']}\tv{f['version']}" for f in flows) or "(no flows)")
    return 0


def _share(args: argparse.Namespace) -> int:
    share = request(args, "POST", f"/api/v1/flows/{args.flow}/shares", json={"user": args.user})
    emit(args, share, f"{args.user} may now execute {args.flow}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    request(args, "DELETE", f"/api/v1/flows/{args.flow}/shares/{args.user}")
    emit(args, None, f"{args.user} may no longer execute {args.flow}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("flows", help="upload, list and share flows")
    sub = parser.add_subparsers(dest="flows_command", metavar="SUBCOMMAND", required=True)
    add = sub.add_parser("add", help="upload a flow (JSON or YAML file); prints its id")
    add.add_argument("file")
    add.set_defaults(handler=run_handler(_add))
    lst = sub.add_parser("list", help="the flows you may run")
    lst.set_defaults(handler=run_handler(_list))
    share = sub.add_parser("share", help="let another user execute a flow you own")
    share.add_argument("flow")
    share.add_argument("user", help="user name or id")
    share.set_defaults(handler=run_handler(_share))
    revoke = sub.add_parser("revoke", help="revoke a share")
    revoke.add_argument("flow")
    revoke.add_argument("user", help="user name or id")
    revoke.set_defaults(handler=run_handler(_revoke))
    for p in (add, lst, share, revoke):
        add_client_options(p)
