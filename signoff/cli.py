"""The `signoff` command. Each subcommand lives in its own module under signoff/commands/ and
exposes ``register(subparsers)``; this file only assembles them."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import signoff.commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="signoff",
        description="Durable human-in-the-loop runtime for agentic flows.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(signoff.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"signoff.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except ValidationError as e:  # a setting (SIGNOFF_*) that cannot be: say which and why, no traceback
        for err in e.errors():
            name = "SIGNOFF_" + "_".join(str(p) for p in err["loc"]).upper()
            msg = err["msg"].removeprefix("Value error, ").removeprefix(f"{name}: ").removeprefix(f"{name} ")
            print(f"signoff: {name}: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
