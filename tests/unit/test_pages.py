"""The pages' pure parts (api/pages): Markdown is sanitised, a ``fields`` schema becomes a form and
a submitted form the decision's values, the flow graph's layout and node states, and the pages
answer with their security headers (the JSON API and /docs have theirs)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import httpx
from starlette.datastructures import FormData

from signoff.api.pages import forms, markdown
from signoff.api.pages.graph import layout, node_states
from signoff.engine.models import Job, JobStatus, PendingRequest, SpanRecord


def test_markdown_is_sanitised() -> None:
    html = str(markdown.render('**ok** <script>alert(1)</script> <img src=x onerror=alert(2)> '
                               '[a](javascript:alert(3)) [b](https://example.com) ![i](https://example.com/i.png)'))
    assert "<strong>ok</strong>" in html
    assert "<script" not in html
    assert "<img" not in html
    assert 'href="javascript' not in html
    assert "&lt;script&gt;" in html  # raw HTML stays text
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">b</a>' in html
    assert markdown.excerpt("a\n\n  b " * 100, 20).endswith("…")


SCHEMA = {"type": "object", "required": ["reason"], "properties": {
    "reason": {"type": "string", "minLength": 3, "title": "Reason"},
    "note": {"type": "string", "maxLength": 50},
    "amount": {"type": "number", "minimum": 0, "maximum": 100},
    "count": {"type": "integer"},
    "notify": {"type": "boolean", "default": True},
    "channel": {"enum": ["bank", "card", 3]},
    "tags": {"type": "array", "items": {"enum": ["urgent", "vip"]}},
    "lines": {"type": "array", "items": {"type": "integer"}},
    "when": {"type": "string", "format": "date"},
}}


def test_a_schema_becomes_labelled_controls() -> None:
    by_name = {f.name: f for f in forms.fields_of(SCHEMA)}
    assert by_name["reason"].control == "textarea" and by_name["reason"].required and by_name["reason"].label == "Reason"
    assert by_name["reason"].attrs == {"minlength": 3}
    assert by_name["note"].control == "text" and by_name["note"].attrs == {"maxlength": 50}
    assert by_name["amount"].control == "number" and by_name["amount"].attrs == {"step": "any", "min": 0, "max": 100}
    assert by_name["count"].attrs == {"step": "1"}
    assert by_name["notify"].control == "checkbox" and by_name["notify"].value is True  # the default
    assert by_name["channel"].control == "select" and [v for v, _ in by_name["channel"].choices] == ["bank", "card", "3"]
    assert by_name["tags"].control == "checkboxes"
    assert by_name["lines"].control == "lines"
    assert by_name["when"].attrs == {"type": "date"}


def test_a_form_becomes_values_as_the_schema_says() -> None:
    form = FormData([("v.reason", "too late"), ("v.note", ""), ("v.amount", "12.5"), ("v.count", "3"),
                     ("v.channel", "3"), ("v.tags", "vip"), ("v.tags", "urgent"), ("v.lines", "1\n 2 \n\n"),
                     ("v.when", "2030-01-02")])
    assert forms.values_from(SCHEMA, form) == {
        "reason": "too late", "amount": 12.5, "count": 3, "notify": False, "channel": 3, "tags": ["vip", "urgent"],
        "lines": [1, 2], "when": "2030-01-02"}
    # what cannot be read as the schema says is sent as typed: the decision check names the field
    assert forms.values_from(SCHEMA, FormData([("v.amount", "lots")]))["amount"] == "lots"
    assert forms.typed_values(form)["tags"] == ["vip", "urgent"]


def test_tool_arguments_keep_their_types_when_edited() -> None:
    args = {"body": "45 EUR", "amount": 45, "items": [1, 2]}
    assert [f.control for f in forms.arg_fields(args)] == ["text", "text", "text"]
    edited = forms.edited_args(args, FormData([("arg.body", "40 EUR"), ("arg.amount", "40"), ("arg.items", "[1")]))
    assert edited == {"body": "40 EUR", "amount": 40, "items": "[1"}


def _job(status: JobStatus, pending: PendingRequest | None = None) -> Job:
    now = datetime.now(timezone.utc)
    return Job(job_id="j1", flow_id="f", flow_version=1, user_id="u", session_id=None, status=status, request={},
               pending=pending, run_id="j1", created_at=now, updated_at=now)


def test_node_states_come_from_the_spans_and_the_pending_request() -> None:
    now = datetime.now(timezone.utc)

    def span(vid: str, **kw) -> SpanRecord:
        return SpanRecord(trace_id="j1", span_id=vid, name=vid, start_time=now, end_time=now + timedelta(seconds=1),
                          status=kw.pop("status", "ok"), attributes={"signoff.vertex_id": vid, **kw})

    spec = {"nodes": [{"id": i, "type": "T"} for i in ("a", "b", "gate", "c", "d")],
            "edges": [{"from": "a.x", "to": "b.y"}, {"from": "b.x", "to": "gate.prompt"},
                      {"from": "gate.branch_ok", "to": "c.y"}, {"from": "gate.branch_no", "to": "d.y"}]}
    pending = PendingRequest(request_id="gate:j1", paused_at=now)
    states = node_states(_job(JobStatus.suspended, pending),
                               [span("a"), span("b", **{"signoff.skipped": True})])
    graph = layout(spec, states)
    by_id = {n.id: n for n in graph.nodes}
    assert {i: n.state for i, n in by_id.items()} == {"a": "built", "b": "skipped", "gate": "paused",
                                                       "c": "not_reached", "d": "not_reached"}
    assert by_id["a"].x < by_id["b"].x < by_id["gate"].x < by_id["c"].x == by_id["d"].x
    assert by_id["c"].y != by_id["d"].y
    failed = node_states(_job(JobStatus.failed), [span("a", status="error", **{"signoff.error": "boom"})])
    assert failed["a"] == ("failed", "boom")


async def test_pages_send_their_security_headers_and_the_api_keeps_its_own(tmp_path) -> None:
    from signoff.api.app import create_app
    from signoff.engine.settings import Settings
    from signoff.engine.store.memory import MemoryStore

    store = MemoryStore()
    await store.setup()
    app = create_app(Settings(home=tmp_path), store=store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        page = await c.get("/sign-in")
        assert page.status_code == 200
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
        assert not re.search(r"<script>|\son\w+=|style=", page.text)  # nothing inline
        assert (await c.get("/")).headers["location"] == "/sign-in?next=%2F"
        static = await c.get("/static/signoff.js")
        assert static.status_code == 200 and "content-security-policy" in static.headers
        docs = await c.get("/docs")
        assert "script-src 'self';" in docs.headers["content-security-policy"]  # its own (api/docs.py)
        assert "/sign-in" not in (await c.get("/openapi.json")).text  # pages stay out of the API's schema


def test_changed_arguments_are_found_as_the_person_typed_them() -> None:
    """What a person approves is what runs (issue 29): a changed argument is a change (old, new);
    a textarea's CRLF, JSON spacing or an argument left out are not; an edit keeps LF as typed."""
    args = {"body": "15 EUR\nto order 1234", "amount": 15, "items": [1, 2]}
    same = FormData([("arg.body", "15 EUR\r\nto order 1234"), ("arg.amount", " 15 "), ("arg.items", "[1,2]")])
    assert forms.arg_changes(args, same) == []
    assert forms.edited_args(args, same) == args
    changed = FormData([("arg.body", "45 EUR\r\nto order 1234 "), ("arg.items", "[1, 2, 3]")])
    assert [(c.name, c.old, c.new) for c in forms.arg_changes(args, changed)] == [
        ("body", "15 EUR\nto order 1234", "45 EUR\nto order 1234 "), ("items", "[1, 2]", "[1, 2, 3]")]
    assert forms.edited_args(args, changed) == {"body": "45 EUR\nto order 1234 ", "amount": 15, "items": [1, 2, 3]}
    assert forms.arg_changes(args, FormData([("arg.other", "x")])) == []  # not an argument of the call
    diff = forms.args_diff(args, {"body": "x", "amount": 15, "items": [1, 2]})
    assert [(c.name, c.old == c.new) for c in diff] == [("body", False), ("amount", True), ("items", True)]


def test_a_refused_value_is_said_in_words() -> None:
    def said(rule: str, name: str = "reason") -> str:
        return forms.in_words({"type": rule, "message": "jsonschema's words"}, SCHEMA, name)

    assert said("required") == "Fill this in."
    assert said("minLength") == "Write at least 3 characters."
    assert said("maximum", "amount") == "Enter 100 or less."
    assert said("type", "count") == "Enter a whole number."
    assert said("maxLength") == "jsonschema's words"  # no such rule on the field: the check's words
    # a card's options that ask different values name their inputs per option
    form = FormData([("v.reject.reason", "late"), ("v.approve.reason", "other")])
    assert forms.values_from(SCHEMA, form, prefix="v.reject.")["reason"] == "late"
    assert forms.typed_values(form, "v.approve.") == {"reason": "other"}


def test_the_cards_context_is_bounded_and_read_from_the_agents_spans() -> None:
    """What a card shows beside the question (api/pages/context.py): the model's last turn and the
    last few tool results of the agent that asked, each cut; nothing after the answer; the step
    that asked and where each option leads, by display name."""
    from signoff.api.pages import context
    from signoff.engine.models import FlowRecord, Option

    now = datetime.now(timezone.utc)
    job = _job(JobStatus.suspended)
    request = PendingRequest(request_id=f"agent:{job.run_id}:1", kind="tool_approval", paused_at=now,
                             options=[Option(action_id="approve", label="Approve")], allowed_decisions=["approve"])

    def child(i: int, kind: str, **kw: object) -> SpanRecord:
        return SpanRecord(trace_id="j1", span_id=f"s{i}", parent_id="agent-span", name=kind, type=kind,
                          start_time=now + timedelta(seconds=i), **kw)

    spans = [SpanRecord(trace_id="j1", span_id="agent-span", name="Agent", start_time=now,
                        attributes={"signoff.vertex_id": "agent"})]
    for i in range(8):
        spans.append(child(2 * i, "llm", outputs={"content": f"turn {i} " + "t" * 5000}))
        spans.append(child(2 * i + 1, "tool", inputs={"q": "a" * 1000}, outputs={"result": f"r{i} " + "x" * 5000},
                           attributes={"signoff.tool.name": "lookup", "signoff.tool.outcome": "ran"}))
    spans.append(SpanRecord(trace_id="j1", span_id="x", parent_id="someone-else", name="other", type="tool",
                            start_time=now + timedelta(seconds=99), outputs={"result": "not this agent's"}))
    turn, tools = context._agent_facts(request, job, spans, until=None)
    assert turn.startswith("turn 7 ") and len(turn) == context.MAX_TURN
    assert [t.result.split()[0] for t in tools] == ["r3", "r4", "r5", "r6", "r7"]  # the last MAX_TOOLS
    assert all(len(t.result) <= context.MAX_TOOL_RESULT and len(t.args) <= context.MAX_TOOL_ARGS for t in tools)
    turn, tools = context._agent_facts(request, job, spans, until=now + timedelta(seconds=6.5))
    assert turn.startswith("turn 3 ") and tools[-1].result.startswith("r2 ")  # what led to it, not after

    flow = FlowRecord(id="f", owner_id="u", name="f", version=1, created_at=now, updated_at=now, spec={
        "nodes": [{"id": "gate", "type": "HumanInput"}, {"id": "ok", "type": "ChatOutput",
                                                          "params": {"display_name": "Send the refund"}}],
        "edges": [{"from": "gate.branch_approve", "to": "ok.input_value"}]})
    gate = PendingRequest(request_id=f"gate:{job.run_id}", paused_at=now,
                          options=[Option(action_id="approve", label="Approve"), Option(action_id="reject", label="Reject")])
    step = context.step_of(gate, job, flow)
    assert step is not None and (step.label, step.kind, step.leads) == ("gate", "HumanInput",
                                                                         [("Approve", "Send the refund")])
    assert context.step_of(gate, job, None) is None


# ---- times and the inbox's search (issue 29) ----------------------------------------------------


def test_a_time_is_one_utc_format_with_a_relative_hint() -> None:
    from signoff.api.pages import formatting

    now = datetime(2026, 12, 3, 12, 0, 30, tzinfo=timezone.utc)
    cases = [(now + timedelta(hours=2, minutes=5), "2026-12-03 14:05 UTC · in 2 h"),
             (now - timedelta(seconds=20), "2026-12-03 12:00 UTC · just now"),
             (now - timedelta(minutes=3), "2026-12-03 11:57 UTC · 3 min ago"),
             (now + timedelta(days=3), "2026-12-06 12:00 UTC · in 3 d")]
    for at, text in cases:
        html = str(formatting.when(at, now))
        assert html == (f'<time datetime="{at.isoformat()}" data-when title="{at.strftime("%Y-%m-%d %H:%M:%S")} UTC">'
                        f"{text}</time>"), html
    assert str(formatting.when(None)) == ""
    # a naive datetime is read as UTC; the markup escapes nothing it need not
    assert "2026-12-03 14:05 UTC" in str(formatting.when(datetime(2026, 12, 3, 14, 5), now))


def test_the_inbox_search_is_a_bounded_plain_substring() -> None:
    from signoff.api.pages import waiting

    assert waiting.search_text("  GaMMa\x00\n ") == "gamma"
    assert waiting.search_text("") is None and waiting.search_text("\x01") is None
    assert len(waiting.search_text("x" * 5000) or "") == waiting.SEARCH_MAX
    at = datetime(2026, 12, 3, tzinfo=timezone.utc)

    def item(text: str, session: str | None, flow: str, due: int | None) -> waiting.InboxItem:
        job = Job(job_id=text, flow_id=flow, flow_version=1, user_id="u", session_id=session, status=JobStatus.suspended,
                  request={"input_value": text}, run_id="r1", created_at=at, updated_at=at)
        request = PendingRequest(request_id="r", prompt="Approve?", paused_at=at)
        return waiting.InboxItem(job=job, request=request, flow_name=flow.title(), owner_name="u", mine=True,
                                 deadline=at + timedelta(minutes=due) if due is not None else None)

    a, b, c = item("Refund GAMMA", "north-7", "refunds", None), item("t.*s chairs", None, "office", 90), \
        item("Laptop", "south", "office", 10)
    assert [x.job.job_id for x in (a, b, c) if waiting.matches(x, "gamma")] == ["Refund GAMMA"]
    assert [x.job.job_id for x in (a, b, c) if waiting.matches(x, "t.*s")] == ["t.*s chairs"]  # not a pattern
    assert [x.job.job_id for x in (a, b, c) if waiting.matches(x, "north")] == ["Refund GAMMA"]
    assert [x.job.job_id for x in (a, b, c) if waiting.matches(x, "office")] == ["t.*s chairs", "Laptop"]
    assert [x.job.job_id for x in waiting.by_deadline([a, b, c])] == ["Laptop", "t.*s chairs", "Refund GAMMA"]
    assert [x.job.job_id for x in waiting.by_flow([a, b, c])] == ["t.*s chairs", "Laptop", "Refund GAMMA"]
