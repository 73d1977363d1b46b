"""`signoff flows add FILE | import FILE... | export FLOW | list | share FLOW USER | revoke FLOW USER`
(over HTTP). A file is a signoff spec (JSON or YAML) or a Langflow export (JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from signoff.commands._client import CommandError, add_client_options, emit, request, run_handler, seg


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


def _import(args: argparse.Namespace) -> int:
    """Upload each file (a signoff spec or a Langflow export); one that cannot be imported is
    reported with every problem, and the others are still imported."""
    failed = 0
    imported = []
    for name in args.files:
        path = Path(name)
        if not path.is_file():
            print(f"error: {path}: no such file", file=sys.stderr)
            failed += 1
            continue
        ctype = "application/yaml" if path.suffix.lower() in (".yaml", ".yml") else "application/json"
        try:
            flow = request(args, "POST", "/api/v1/flows", content=path.read_bytes(), headers={"content-type": ctype})
        except CommandError as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            failed += 1
            continue
        imported.append(flow)
        if not args.json:
            print(f"{flow['id']}\t{flow['name']} (version {flow['version']})\t{path}")
    if args.json:
        print(json.dumps(imported, indent=2, default=str))
    return 1 if failed else 0


def _export(args: argparse.Namespace) -> int:
    doc = request(args, "GET", f"/api/v1/flows/{seg(args.flow)}/export", params={"format": args.format})
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    if args.output and args.output != "-":
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{args.flow} written to {args.output} ({args.format})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _list(args: argparse.Namespace) -> int:
    flows = request(args, "GET", "/api/v1/flows")
    emit(args, flows, "\n".join(f"{f['id']}\t{f['name']}\tv{f['version']}" for f in flows) or "(no flows)")
    return 0


def _share(args: argparse.Namespace) -> int:
    share = request(args, "POST", f"/api/v1/flows/{seg(args.flow)}/shares", json={"user": args.user})
    emit(args, share, f"{args.user} may now execute {args.flow}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    request(args, "DELETE", f"/api/v1/flows/{seg(args.flow)}/shares/{seg(args.user)}")
    emit(args, None, f"{args.user} may no longer execute {args.flow}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("flows", help="upload, list and share flows")
    sub = parser.add_subparsers(dest="flows_command", metavar="SUBCOMMAND", required=True)
    add = sub.add_parser("add", help="upload a flow (a JSON or YAML spec, or a Langflow export); prints its id")
    add.add_argument("file")
    add.set_defaults(handler=run_handler(_add))
    imp = sub.add_parser("import", help="upload flows: signoff specs or Langflow exports (JSON); prints their ids")
    imp.add_argument("files", nargs="+", metavar="FILE")
    imp.set_defaults(handler=run_handler(_import))
    exp = sub.add_parser("export", help="write a flow as a Langflow export (or its signoff spec)")
    exp.add_argument("flow", help="flow id")
    exp.add_argument("-o", "--output", help="file to write (default: stdout)")
    exp.add_argument("--format", choices=("langflow", "signoff"), default="langflow")
    exp.set_defaults(handler=run_handler(_export))
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
    for p in (add, imp, exp, lst, share, revoke):
        add_client_options(p)
