"""`signoff audit export | verify | rotate-key`: the oversight record (DESIGN §16, docs/audit.md).

- ``export --since DATE [--until DATE] [--flow ID] --format jsonl|csv``: every run's receipts
  in the window, to standard output (the operator's: SIGNOFF_OPERATORS; others get 403).
- ``verify FILE`` (an export, JSONL or CSV; ``-``: standard input) or ``verify --run JOB``
  (the run's receipts, fetched): every signature against the public keys (fetched from the
  server, or ``--keys FILE``, the answer of GET /api/v1/audit/public-key, for fully offline
  use) and each run's chain. Prints the first break (which receipt, what is wrong) and exits 2;
  0 when all hold; 1 when it could not check (no keys, a file it cannot read).
- ``rotate-key``: a new signing key from now on (talks to the database directly, as
  ``signoff users`` does: the operator's); every earlier key stays, old receipts verify.

Each check is its own function over receipts already read (``check_receipts``), so that
``verify --run`` can run more checks of a run (``RUN_CHECKS``)."""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

from signoff.commands._client import CommandError, add_client_options, client, check, run_handler, seg

if TYPE_CHECKING:
    from signoff.engine.audit.receipts import Break

EXIT_BROKEN = 2
# the receipt's fields that are JSON in a CSV cell (the rest are text; empty is null)
JSON_FIELDS = ("decided_by", "values", "proposed_args", "executed_args")


@cache
def csv_columns() -> tuple[str, ...]:
    """An export's CSV columns. The receipts' module is imported by the audit commands when they
    run, not when ``signoff`` builds its parser: it brings the engine's decisions (jsonschema,
    its models), ~0.12 s of every command's start (tests/unit/test_cli_start.py)."""
    from signoff.engine.audit.receipts import FIELDS
    return ("seq", *FIELDS)
MAX_FILE_BYTES = 1 << 30  # an export read for verification, at most


# ---- export -----------------------------------------------------------------------------


def _pages(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    params: dict[str, Any] = {"since": args.since, "limit": 1000}
    if args.until:
        params["until"] = args.until
    if args.flow:
        params["flow"] = args.flow
    with client(args, timeout=120.0) as http:
        while True:
            page = check(http.get("/api/v1/audit/receipts", params=params))
            yield from page["receipts"]
            if not page.get("next"):
                return
            params["cursor"] = page["next"]


def csv_row(receipt: dict[str, Any]) -> list[str]:
    row = []
    for name in csv_columns():
        value = receipt.get(name)
        if value is None:
            row.append("")
        elif name in JSON_FIELDS:
            row.append(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
        else:
            row.append(str(value))
    return row


def _export(args: argparse.Namespace) -> int:
    out = sys.stdout
    writer = csv.writer(out) if args.format == "csv" else None
    if writer is not None:
        writer.writerow(csv_columns())
    n = 0
    for receipt in _pages(args):
        if writer is not None:
            writer.writerow(csv_row(receipt))
        else:
            out.write(json.dumps(receipt, ensure_ascii=False, separators=(",", ":")) + "\n")
        n += 1
    out.flush()
    print(f"exported {n} receipt(s)", file=sys.stderr)
    return 0


# ---- verify -----------------------------------------------------------------------------


def from_csv(text: str) -> list[dict[str, Any]]:
    """An export's CSV back into receipts (the inverse of :func:`csv_row`)."""
    found = []
    for row in csv.DictReader(io.StringIO(text)):
        receipt: dict[str, Any] = {}
        for name in csv_columns():
            cell = row.get(name)
            if cell is None or cell == "":
                receipt[name] = None
            elif name in JSON_FIELDS:
                receipt[name] = json.loads(cell)
            elif name in ("seq", "flow_version"):
                receipt[name] = int(cell)
            else:
                receipt[name] = cell
        found.append(receipt)
    return found


def read_export(path: str) -> list[dict[str, Any]]:
    """The receipts of an export file (JSONL, or CSV with its header)."""
    try:
        if path == "-":
            text = sys.stdin.read(MAX_FILE_BYTES + 1)
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise CommandError(f"cannot read {path}: {e.strerror}") from None
    if len(text) > MAX_FILE_BYTES:
        raise CommandError(f"{path} is larger than {MAX_FILE_BYTES} bytes: export a shorter window")
    try:
        if text.lstrip().startswith("{"):
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return from_csv(text)
    except ValueError as e:
        raise CommandError(f"{path} is not a receipts export (JSONL or CSV): {e}") from None


def load_keys(args: argparse.Namespace) -> dict[str, Any]:
    """``{key_id: public key}``: from ``--keys FILE`` (offline), else from the server."""
    if args.keys:
        try:
            with open(args.keys, encoding="utf-8") as f:
                body = json.load(f)
        except (OSError, ValueError) as e:
            raise CommandError(f"cannot read the keys in {args.keys}: {e}") from None
    else:
        with client(args) as http:
            body = check(http.get("/api/v1/audit/public-key"))
    from signoff.engine.audit.receipts import public_keys

    keys = public_keys(body.get("keys") or [] if isinstance(body, dict) else [])
    if not keys:
        raise CommandError("no usable public key (GET /api/v1/audit/public-key gives them)")
    return keys


def by_run(receipts: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each run's receipts in chain order (by ``seq`` when given, else as listed)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for receipt in receipts:
        runs.setdefault(str(receipt.get("job_id")), []).append(receipt)
    for items in runs.values():
        if all(isinstance(r.get("seq"), int) for r in items):
            items.sort(key=lambda r: r["seq"])
    return runs


def check_receipts(receipts: list[dict[str, Any]], keys: dict[str, Any], *, whole_run: bool) -> Break | None:
    """One run's receipts: each signature, and the chain (from its start when ``whole_run``; an
    export's run may start at a later ``seq``, its window's first)."""
    first = receipts[0].get("seq") if receipts else None
    from_start = whole_run or not isinstance(first, int) or first <= 1
    from signoff.engine.audit.receipts import verify_run

    signed = [{k: v for k, v in r.items() if k != "seq"} for r in receipts]
    return verify_run(signed, keys, from_start=from_start)


def _fetch_run(args: argparse.Namespace, job_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after = 0
    with client(args) as http:
        while True:
            page = check(http.get(f"/api/v1/runs/{seg(job_id)}/receipts", params={"after": after, "limit": 1000}))
            found += page["receipts"]
            if page.get("next_after") is None:
                return found
            after = page["next_after"]


def _check_events(args: argparse.Namespace, job_id: str) -> str | None:
    """The run's event log against its hash chain (signoff/commands/audit_events.py): what is
    broken, in words, or None."""
    from signoff.commands.audit_events import verify_run_events

    with client(args) as http:
        found = verify_run_events(http, job_id)
    return None if found.ok else found.describe()


# what `verify --run` checks of a run, in order: (name, check of (args, job id, keys)) answering
# what is broken (a Break, or words) or None
RUN_CHECKS: list[tuple[str, Callable[[argparse.Namespace, str, dict[str, Any]], object | None]]] = [
    ("receipts", lambda args, job_id, keys: check_receipts(_fetch_run(args, job_id), keys, whole_run=True)),
    ("events", lambda args, job_id, keys: _check_events(args, job_id)),
]


def _verify(args: argparse.Namespace) -> int:
    if bool(args.file) == bool(args.run):
        raise CommandError("give an export FILE or --run JOB (one of them)")
    keys = load_keys(args)
    if args.run:
        for name, run_check in RUN_CHECKS:
            broken = run_check(args, args.run, keys)
            if broken is not None:
                print(f"BROKEN ({name}): {broken}")
                return EXIT_BROKEN
        print(f"OK: run {args.run}: " + ", ".join(name for name, _ in RUN_CHECKS) + " verified")
        return 0
    receipts = read_export(args.file)
    runs = by_run(receipts)
    for items in runs.values():
        broken = check_receipts(items, keys, whole_run=False)
        if broken is not None:
            print(f"BROKEN: {broken}")
            return EXIT_BROKEN
    print(f"OK: {len(receipts)} receipt(s) of {len(runs)} run(s) verified")
    return 0


# ---- rotate-key -------------------------------------------------------------------------


async def _rotate() -> str:
    from signoff.commands.users import _open
    from signoff.engine.audit.keys import ReceiptKeys
    from signoff.engine.settings import Settings

    settings = Settings()
    store = _open(settings)
    try:
        await store.setup()
        return (await ReceiptKeys(store, settings).rotate()).key_id
    finally:
        await store.close()


def _rotate_key(args: argparse.Namespace) -> int:
    from signoff.commands.users import WrongDatabase

    try:
        key_id = asyncio.run(_rotate())
    except WrongDatabase as e:
        raise CommandError(str(e)) from None
    print(f"new receipts are signed with key {key_id}; earlier keys are kept (GET /api/v1/audit/public-key)",
          file=sys.stderr)
    print(key_id)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("audit", help="the oversight record: export, verify, rotate the signing key")
    sub = parser.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)
    export = sub.add_parser("export", help="every run's receipts in a time window, to standard output (operators)")
    export.add_argument("--since", required=True, help="from this date or time (ISO 8601, UTC)")
    export.add_argument("--until", help="before this date or time")
    export.add_argument("--flow", help="only this flow's runs")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    add_client_options(export)
    export.set_defaults(handler=run_handler(_export))
    verify = sub.add_parser("verify", help="check the signatures and chains of an export or of a run; exit 2 "
                                           "naming the first break")
    verify.add_argument("file", nargs="?", help="an export (JSONL or CSV; - for standard input)")
    verify.add_argument("--run", help="a run's receipts, fetched from the server")
    verify.add_argument("--keys", help="the public keys (GET /api/v1/audit/public-key's answer) for offline use")
    add_client_options(verify)
    verify.set_defaults(handler=run_handler(_verify))
    rotate = sub.add_parser("rotate-key", help="sign new receipts with a new key (talks to the database directly)")
    rotate.set_defaults(handler=run_handler(_rotate_key))
