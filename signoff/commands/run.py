"""`signoff run FLOW_FILE --input TEXT`: run a flow in this process (no server, no Temporal),
asking at the terminal at each gate."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from signoff.engine.errors import FlowInvalid, SignoffError
from signoff.engine.plaintext import plain

if TYPE_CHECKING:
    from signoff.engine.spec import FlowSpec


def _ask(pending, read: Callable[[str], str]) -> tuple[str, dict | None]:
    print(f"\n-- {plain(pending.prompt) or 'Decision needed'}", file=sys.stderr)
    for o in pending.options:
        print(f"   [{o.action_id}] {o.label}", file=sys.stderr)
    allowed = list(pending.allowed_decisions)
    while True:
        try:
            answer = read(f"choose ({'/'.join(allowed)}): ").strip()
        except EOFError:
            raise SystemExit("no answer on stdin; stopping (the run was not completed)") from None
        action = answer.lower().replace(" ", "_")
        if action in allowed:
            return action, _tool_values(pending, action, read)
        print(f"   '{answer}' is not one of {allowed}", file=sys.stderr)


def _tool_values(pending, action: str, read: Callable[[str], str]) -> dict | None:
    """An Agent's tool approval: edit asks for the arguments (JSON), reject/respond for a message."""
    if pending.kind != "tool_approval":
        return None
    if action == "edit":
        while True:
            text = read(f"arguments as JSON [{json.dumps((pending.tool or {}).get('args') or {})}]: ").strip()
            try:
                args = json.loads(text) if text else (pending.tool or {}).get("args") or {}
            except ValueError:
                args = None
            if isinstance(args, dict):
                return {"args": args}
            print("   give a JSON object, e.g. {\"body\": \"5 EUR\"}", file=sys.stderr)
    if action in ("reject", "respond"):
        message = read("message for the model: ").strip()
        while action == "respond" and not message:
            message = read("message for the model (required): ").strip()
        return {"message": message} if message else None
    return None


async def run_file(path: Path, input_value: str, *, read: Callable[[str], str] = input, out=sys.stdout) -> int:
    from signoff.engine.store.memory import MemoryStore
    from signoff.engine.runner import InProcessRunner

    from signoff.engine.settings import Settings
    from signoff.engine.tracing import RunTracing
    from signoff.engine.tracing import sdk as telemetry

    settings = Settings()
    # the same one-trace story as a run on Temporal (docs/tracing.md): to OTLP when configured
    tel = telemetry.install(settings, service_name="signoff-run")
    store = MemoryStore()  # the run's checkpoints and its chat history, for this process only
    runner = InProcessRunner(store, store, settings=settings, tracing=RunTracing())
    try:
        return await _run(runner, path, input_value, read, out)
    finally:
        if tel.exports_otlp:
            await asyncio.to_thread(tel.flush_otlp)


def _settings():
    from signoff.engine.settings import Settings

    return Settings()


def load_file(path: Path, settings) -> FlowSpec:
    """The flow in ``path``, read as the API reads an upload: the one parser (JSON, or YAML 1.2 with
    no anchors or aliases; nesting at most SIGNOFF_MAX_JSON_DEPTH) and the engine's validation
    with SIGNOFF_MAX_FLOW_NODES. Raises FlowInvalid."""
    from signoff.engine.spec import parse_text
    from signoff.engine.validate import parse_and_validate

    data = parse_text(path.read_bytes(), max_depth=settings.max_json_depth)
    if not isinstance(data, dict):
        raise FlowInvalid([{"message": "a flow is an object with name, nodes and edges"}])
    return parse_and_validate(data, max_nodes=settings.max_flow_nodes)


async def _run(runner, path: Path, input_value: str, read: Callable[[str], str], out) -> int:
    run_id = str(uuid.uuid4())
    spec = load_file(path, runner.settings if runner.settings is not None else _settings())
    outcome = await runner.start(spec, run_id=run_id, input_value=input_value, session_id=run_id)
    while outcome.status == "paused" and outcome.pending is not None:
        action, values = _ask(outcome.pending, read)
        outcome = await runner.resume(run_id, outcome.pending.request_id, {"action_id": action, "values": values},
                                      decided_by="terminal")
    if outcome.status == "failed":
        print(f"failed: {json.dumps(outcome.error, default=str)}", file=sys.stderr)
        return 1
    result = outcome.result or {}
    text = ((result.get("output") or {}).get("text")) or ""
    print(text, file=out)
    return 0


def _handle(args: argparse.Namespace) -> int:
    path = Path(args.flow)
    if not path.is_file():
        print(f"error: no such file: {path}", file=sys.stderr)
        return 1
    try:
        return asyncio.run(run_file(path, args.input))
    except FlowInvalid as e:
        print(f"error: {e.message}", file=sys.stderr)
        for p in e.problems:
            print(f"  - {p.get('message', p) if isinstance(p, dict) else p}", file=sys.stderr)
        return 1
    except SignoffError as e:
        print(f"error: {e.code}: {e.message}", file=sys.stderr)
        return 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run a flow file in this process, asking at the terminal at each gate")
    parser.add_argument("flow", help="flow file (JSON or YAML)")
    parser.add_argument("--input", default="", help="the run's input value")
    parser.set_defaults(handler=_handle)
