"""`signoff worker`: run FlowRun workflows and their activities (settings from the environment)."""

from __future__ import annotations

import argparse
import asyncio
import logging

from signoff.engine.settings import Settings


def _handle(args: argparse.Namespace) -> int:
    from signoff.home import prepare_home
    from signoff.worker import run_worker

    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="%(asctime)s %(name)s %(message)s")
    overrides = {}
    if args.task_queue:
        overrides["task_queue"] = args.task_queue
    settings = Settings(**overrides)
    prepare_home(settings.home)  # a secrets key file, a SQLite database may live there
    asyncio.run(run_worker(settings))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "worker", help="run workflows and activities (SIGNOFF_TEMPORAL_ADDRESS, SIGNOFF_DATABASE_URL); stops on SIGTERM"
    )
    parser.add_argument("--task-queue", help="task queue (SIGNOFF_TASK_QUEUE, default signoff)")
    parser.add_argument("--log-level", default="warning", choices=["error", "warning", "info", "debug"])
    parser.set_defaults(handler=_handle)
