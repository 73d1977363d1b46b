"""`signoff submit FLOW --input TEXT`: start a run (background by default; --wait follows it)."""

from __future__ import annotations

import argparse
import sys

from signoff.commands._client import add_client_options, describe_event, emit, request, run_handler, sse_events, seg


def _handle(args: argparse.Namespace) -> int:
    body = {"flow_id": args.flow, "input_value": args.input, "mode": "background"}
    if args.session:
        body["session_id"] = args.session
    if args.idempotency_key:
        body["idempotency_key"] = args.idempotency_key
    if args.sync:
        body["mode"] = "sync"
        resp = request(args, "POST", "/api/v2/workflows", json=body)
        text = f"{resp['job_id']}\t{resp['status']}"
        if resp.get("human_request"):
            hr = resp["human_request"]
            text += f"\nwaiting for: {hr['prompt']!r} ({', '.join(hr['allowed_decisions'])}); request {hr['request_id']}"
        elif resp.get("output"):
            text += f"\n{(resp['output'] or {}).get('text')}"
        emit(args, resp, text)
        return 0
    job = request(args, "POST", "/api/v2/workflows", json=body)
    emit(args, job, f"{job['job_id']}\t{job['status']}")
    if args.wait:
        for ev in sse_events(args, "GET", f"/api/v2/workflows/{seg(job['job_id'])}/events"):
            print(describe_event(ev), file=sys.stderr, flush=True)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("submit", help="run a flow on the server; prints the job id")
    parser.add_argument("flow", help="flow id")
    parser.add_argument("--input", default="", help="the run's input value")
    parser.add_argument("--session", help="session id (a new run supersedes this session's suspended runs)")
    parser.add_argument("--idempotency-key", help="the same key returns the same job")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--wait", action="store_true", help="follow the run's events until the end or a pause")
    mode.add_argument("--sync", action="store_true", help="sync mode: one response at the end or the first pause")
    add_client_options(parser)
    parser.set_defaults(handler=run_handler(_handle))
