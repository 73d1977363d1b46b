"""`signoff pending [--flow FLOW]`: what waits for you to decide: your own runs and the requests
assigned to you (by name, by group, by an escalation) in anyone's runs."""

from __future__ import annotations

import argparse

from signoff.commands._client import add_client_options, emit, request, run_handler
from signoff.engine.plaintext import one_line


def _handle(args: argparse.Namespace) -> int:
    params = {"flow_id": args.flow} if args.flow else None
    items = request(args, "GET", "/api/v2/workflows/pending", params=params)
    lines = [
        f"{i['job_id']}\t{i['flow_id']}\t{i['request_id']}\t{one_line(i['prompt'])}\t{'/'.join(i['allowed_decisions'])}"
        for i in items
    ]
    emit(args, items, "\n".join(lines) or "(nothing pending)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("pending", help="list what waits for your decision (your runs and those assigned to you)")
    parser.add_argument("--flow", help="only this flow")
    add_client_options(parser)
    parser.set_defaults(handler=run_handler(_handle))
