"""`signoff resume JOB --action approve [--values JSON] [--request-id ID]`."""

from __future__ import annotations

import argparse
import json

from signoff.commands._client import CommandError, add_client_options, emit, request, run_handler, seg


def _handle(args: argparse.Namespace) -> int:
    values = None
    if args.values:
        try:
            values = json.loads(args.values)
        except ValueError as e:
            raise CommandError(f"--values is not JSON: {e}") from None
        if not isinstance(values, dict):
            raise CommandError("--values must be a JSON object")
    request_id = args.request_id
    if not request_id:
        pending = request(args, "GET", f"/api/v2/workflows/{seg(args.job)}/pending")
        request_id = pending["request_id"]
    decision: dict = {"action_id": args.action}
    if values is not None:
        decision["values"] = values
    body = request(args, "POST", f"/api/v2/workflows/{seg(args.job)}/resume", json={"request_id": request_id, "decision": decision})
    emit(args, body, f"{body['job_id']}\t{body['status']}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("resume", help="answer a suspended run")
    parser.add_argument("job", help="job id")
    parser.add_argument("--action", required=True, help="action id, e.g. approve or reject")
    parser.add_argument("--values", help="JSON object of values for the decision")
    parser.add_argument("--request-id", help="the request to answer (default: the job's pending request)")
    add_client_options(parser)
    parser.set_defaults(handler=run_handler(_handle))
