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
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
