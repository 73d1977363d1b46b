"""`signoff status JOB [--follow]`: a job's status (and the pending request when suspended)."""

from __future__ import annotations

import argparse
import sys

from signoff.commands._client import add_client_options, describe_event, emit, request, run_handler, sse_events, seg
from signoff.engine.plaintext import plain


def _handle(args: argparse.Namespace) -> int:
    if args.follow:
        for ev in sse_events(args, "GET", f"/api/v2/workflows/{seg(args.job)}/events"):
            print(describe_event(ev), file=sys.stderr, flush=True)
    body = request(args, "GET", f"/api/v2/workflows/{seg(args.job)}")
    text = f"{body['job_id']}\t{body['status']}"
    if body.get("human_request"):
        hr = body["human_request"]
        prompt = "\n  ".join(plain(hr["prompt"]).splitlines())
        text += f"\nwaiting for a decision ({', '.join(hr['allowed_decisions'])}) on request {hr['request_id']}:\n  {prompt}"
    if body.get("output"):
        text += f"\noutput: {(body['output'] or {}).get('text')}"
    for err in body.get("errors") or []:
        text += f"\nerror: {err}"
    emit(args, body, text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="show a job's status")
    parser.add_argument("job", help="job id")
    parser.add_argument("--follow", action="store_true", help="print the events until the end or a pause first")
    add_client_options(parser)
    parser.set_defaults(handler=run_handler(_handle))
