"""`signoff delete JOB`: delete an ended run of yours with everything of it (its bytes given back to
your count of stored bytes; docs/api.md). A run that has not ended is refused: stop it first."""

from __future__ import annotations

import argparse

from signoff.commands._client import add_client_options, emit, request, run_handler, seg


def _handle(args: argparse.Namespace) -> int:
    # the id is one path segment, whatever it holds: a "/" or ".." cannot reach another route
    request(args, "DELETE", f"/api/v2/workflows/{seg(args.job)}")
    emit(args, {"job_id": args.job, "deleted": True}, f"run {args.job} deleted")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("delete", help="delete an ended run with everything of it")
    parser.add_argument("job", help="job id")
    add_client_options(parser)
    parser.set_defaults(handler=run_handler(_handle))
