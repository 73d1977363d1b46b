"""Langflow flows through the real API, run on Temporal (the `api` harness: the app, a worker and
the shared dev server, on SQLite and PostgreSQL): exports built at test time in Langflow's format
(tests/fixtures/langflow.py) are uploaded, run, paused and resumed by Langflow's node ids, tweaked
by node id, nested with Run Flow, refused with every problem listed, exported and imported back,
and taken from SIGNOFF_FLOWS_DIR and by the CLI. The model is a real OpenAI-compatible HTTP server
replaying a script (tests/fixtures/fake_openai.py)."""

from __future__ import annotations

import asyncio
import contextlib
import html
import io
import json
import re
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from signoff.api.flows_dir import public_owner_id, sync_flows_dir
from signoff.engine.models import JobStatus
from tests.fixtures.fake_openai import FakeOpenAI, ToolTarget, call, say
from tests.fixtures.langflow import (
    agent,
    api_request,
    chat_input,
    chat_output,
    field,
    human_input,
    if_else,
    lf_edge,
    lf_flow,
    lf_node,
    memory,
    openai_model,
    prompt,
    run_flow,
    text_input,
    text_output,
)
from tests.integration.api.conftest import Harness
from tests.integration.api.test_inbox_pages import signed_in

pytestmark = pytest.mark.temporal


@pytest.fixture
def llm(api: Harness) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        api.egress.add(server)
        yield server


async def upload(api: Harness, doc: dict[str, Any], user: str = "alice") -> dict[str, Any]:
    async with api.client(user) as c:
        r = await c.post("/api/v1/flows", json=doc)
    assert r.status_code == 201, r.text
    return r.json()


async def run(api: Harness, flow_id: str, text: str = "hi", user: str = "alice", **body: Any) -> dict[str, Any]:
    """A background run on Temporal, to its end or its pause; the job's answer."""
    async with api.client(user) as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": text, "mode": "background",
                                                    **body})
        assert r.status_code == 200, r.text
        job_id = r.json()["job_id"]
        await api.wait_status(job_id, JobStatus.completed, JobStatus.suspended, JobStatus.failed)
        return (await c.get(f"/api/v2/workflows/{job_id}")).json()


def unique(name: str) -> str:
    return f"{name} {uuid.uuid4().hex[:6]}"


# ---- Langflow's starter projects ---------------------------------------------------------------


def basic_prompting(llm: FakeOpenAI) -> dict[str, Any]:
    ci, pr = chat_input("ChatInput-jFwU1"), prompt("Prompt-3SM21", "Answer the user as a pirate would.")
    model, co = openai_model("OpenAIModel-OcX11", llm.base_url), chat_output("ChatOutput-gDY11")
    return lf_flow("Basic Prompting", [ci, pr, model, co], [
        lf_edge(ci, "message", model, "input_value"), lf_edge(pr, "prompt", model, "system_message"),
        lf_edge(model, "text_output", co, "input_value")])


def memory_chatbot(llm: FakeOpenAI) -> dict[str, Any]:
    """Message History into the Prompt's {memory}, the Prompt as the model's system message, the
    user's message as its input."""
    hist = memory("Memory-mC001")
    pr = prompt("Prompt-mC002", "You are a helpful assistant that remembers.\n\nMessage history:\n{memory}")
    ci, model, co = chat_input("ChatInput-mC003"), openai_model("OpenAIModel-mC004", llm.base_url), chat_output(
        "ChatOutput-mC005")
    return lf_flow(unique("Memory Chatbot"), [hist, pr, ci, model, co], [
        lf_edge(hist, "messages_text", pr, "memory"), lf_edge(pr, "prompt", model, "system_message"),
        lf_edge(ci, "message", model, "input_value"), lf_edge(model, "text_output", co, "input_value")])


async def test_basic_prompting_imports_and_runs(api: Harness, llm: FakeOpenAI) -> None:
    llm.add(say("Arr, ahoy there!"))
    flow = await upload(api, basic_prompting(llm))
    assert [n["id"] for n in flow["spec"]["nodes"]] == ["ChatInput-jFwU1", "Prompt-3SM21", "OpenAIModel-OcX11",
                                                         "ChatOutput-gDY11"]
    done = await run(api, flow["id"], "hello", session_id="bp")
    assert done["status"] == "completed", done
    assert done["output"]["text"] == "Arr, ahoy there!"
    assert done["outputs"]["ChatOutput-gDY11"]["content"] == "Arr, ahoy there!"
    assert llm.requests[0]["messages"] == [{"role": "system", "content": "Answer the user as a pirate would."},
                                           {"role": "user", "content": "hello"}]


async def test_memory_chatbot_remembers_the_session_and_only_its_users(api: Harness, llm: FakeOpenAI) -> None:
    llm.add(say("Nice to meet you, Ann."), say("You are Ann."), say("I do not know you."))
    flow = await upload(api, memory_chatbot(llm))
    async with api.client("alice") as c:  # bob may run it too: same session name, his own history
        await c.post(f"/api/v1/flows/{flow['id']}/shares", json={"user": api.users["bob"][0]})
    first = await run(api, flow["id"], "I am Ann", session_id="mem-1")
    assert first["status"] == "completed", first
    assert llm.requests[0]["messages"][0]["content"].endswith("Message history:\n")  # nothing before
    second = await run(api, flow["id"], "Who am I?", session_id="mem-1")
    assert second["output"]["text"] == "You are Ann."
    assert llm.requests[1]["messages"][0]["content"].endswith(
        "Message history:\nUser: I am Ann\nAI: Nice to meet you, Ann.")
    assert llm.requests[1]["messages"][1] == {"role": "user", "content": "Who am I?"}
    theirs = await run(api, flow["id"], "Who am I?", user="bob", session_id="mem-1")
    assert theirs["status"] == "completed", theirs
    assert llm.requests[2]["messages"][0]["content"].endswith("Message history:\n")


# ---- a pause on an imported Human Input, tweaks, an If-Else ---------------------------------


def approval_flow() -> dict[str, Any]:
    ci = chat_input("ChatInput-abc12")
    gate = human_input("HumanInput-x8Kq2", "", ["Approve", "Reject"])
    ok = chat_output("ChatOutput-ok001", sender_name="Bot")
    router = if_else("ConditionalRouter-no001", "contains", "urgent", case_sensitive=False,
                     true_case_message="Refused, urgently", false_case_message="Refused")
    no_urgent, no = chat_output("ChatOutput-no002"), chat_output("ChatOutput-no003")
    return lf_flow(unique("Refund approval"), [ci, gate, ok, router, no_urgent, no], [
        lf_edge(ci, "message", gate, "prompt"), lf_edge(gate, "branch_approve", ok, "input_value"),
        lf_edge(gate, "branch_reject", router, "input_text"),
        lf_edge(router, "true_result", no_urgent, "input_value"), lf_edge(router, "false_result", no, "input_value")])


async def test_pause_and_resume_on_an_imported_human_input_by_its_langflow_id(api: Harness) -> None:
    flow = await upload(api, approval_flow())
    paused = await run(api, flow["id"], "refund 42 EUR", session_id="hi-1")
    assert paused["status"] == "suspended", paused
    job_id = paused["job_id"]
    request = paused["human_request"]
    assert request["request_id"] == f"HumanInput-x8Kq2:{job_id}"
    assert request["prompt"] == "refund 42 EUR" and request["allowed_decisions"] == ["approve", "reject"]
    async with api.client("alice") as c:
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": request["request_id"], "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        await api.wait_status(job_id, JobStatus.completed)
        done = (await c.get(f"/api/v2/workflows/{job_id}")).json()
        assert done["outputs"] == {"ChatOutput-ok001": {"type": "message", "status": "completed",
                                                        "display_name": "Chat Output", "content": "refund 42 EUR"}}
        trace = (await c.get(f"/api/v1/monitor/traces/{job_id}")).json()

    def spans(nodes: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for node in nodes:
            yield node
            yield from spans(node["children"])

    names = {s["name"]: s for s in spans(trace["spans"])}
    assert "Human In The Loop — Approve" in names
    assert {s["attributes"].get("signoff.vertex_id") for s in names.values()} >= {"ChatInput-abc12", "ChatOutput-ok001"}

    rejected = await run(api, flow["id"], "URGENT refund", session_id="hi-2")
    async with api.client("alice") as c:
        r = await c.post(f"/api/v2/workflows/{rejected['job_id']}/resume",
                         json={"request_id": f"HumanInput-x8Kq2:{rejected['job_id']}", "decision": {"action_id": "reject"}})
        assert r.status_code == 200, r.text
        await api.wait_status(rejected["job_id"], JobStatus.completed)
        done = (await c.get(f"/api/v2/workflows/{rejected['job_id']}")).json()
    assert done["output"]["text"] == "Refused, urgently"  # If-Else (contains, not case-sensitive) and its Case True


async def test_the_run_graph_names_imported_nodes_by_their_langflow_display_names(api: Harness) -> None:
    """Issue 29: a Langflow node is drawn by its display name (``data.node.display_name``: the
    type's own, or one the person gave it), never its id; the id stays in the node's tooltip."""
    ci = chat_input("ChatInput-Rr8Tu")
    gate = human_input("HumanInput-Qm2Zx", "", ["Approve", "Reject"])
    gate["data"]["node"]["display_name"] = "Finance sign-off"
    ok = lf_node("ChatOutput-Kp9Lw", "ChatOutput", {"input_value": "", "sender_name": "Bot"},
                 display="Refund <sent>")
    flow = await upload(api, lf_flow(unique("Named nodes"), [ci, gate, ok], [
        lf_edge(ci, "message", gate, "prompt"), lf_edge(gate, "branch_approve", ok, "input_value")]))
    paused = await run(api, flow["id"], "refund 42 EUR")
    assert paused["status"] == "suspended", paused
    async for _, page in signed_in(api, "alice"):
        r = await page.get(f"/runs/{paused['job_id']}")
    assert r.status_code == 200, r.text
    graph = r.text[r.text.index('<svg class="graph"'):]
    graph = graph[:graph.index("</svg>")]
    labels = [html.unescape(x) for x in re.findall(r'class="node-label">([^<]*)</text>', graph)]
    assert sorted(labels) == ["Chat Input", "Finance sign-off", "Refund <sent>"]
    titles = [html.unescape(x) for x in re.findall(r"<title>([^<]*)</title>", graph)]
    for label, nid in (("Chat Input", "ChatInput-Rr8Tu"), ("Finance sign-off", "HumanInput-Qm2Zx"),
                       ("Refund <sent>", "ChatOutput-Kp9Lw")):
        assert any(t.startswith(f"{label} ({nid}, ") for t in titles), titles
    assert "Rr8Tu" not in "".join(labels) and "<sent>" not in graph  # escaped


async def test_tweaks_by_langflow_node_id_with_langflows_field_names(api: Harness) -> None:
    ci, words = chat_input("ChatInput-tw001"), text_input("TextInput-tw002", "as written")
    pr = prompt("Prompt-tw003", "{said} / {words}")
    out = text_output("TextOutput-tw004")
    flow = await upload(api, lf_flow(unique("Tweaked"), [ci, words, pr, out], [
        lf_edge(ci, "message", pr, "said"), lf_edge(words, "text", pr, "words"), lf_edge(pr, "prompt", out, "input_value")]))
    plain = await run(api, flow["id"], "typed")
    assert plain["output"]["text"] == "typed / as written"
    tweaked = await run(api, flow["id"], "typed", tweaks={"TextInput-tw002": {"input_value": "tweaked"},
                                                          "ChatInput-tw001": {"input_value": "from the tweak"}})
    assert tweaked["status"] == "completed", tweaked
    assert tweaked["output"]["text"] == "from the tweak / tweaked"
    async with api.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": flow["id"], "input_value": "x",
                                                    "tweaks": {"TextInput-nope": {"input_value": "y"}}})
    assert r.status_code == 422 and "TextInput-nope" in r.text


# ---- an Agent's tool approval on an imported flow --------------------------------------------


async def test_agent_tool_approval_on_an_imported_flow(api: Harness, llm: FakeOpenAI) -> None:
    with ToolTarget() as target:
        api.egress.add(target)
        llm.add(call("send_refund", {"body": "5 EUR"}), say("Refund of 5 EUR sent."))
        ci = chat_input("ChatInput-ag001")
        ag = agent("Agent-ag002", llm.base_url, system_prompt="You send refunds.")
        pay = api_request("APIRequest-ag003", f"{target.url}/refunds", "POST",
                          tool={"name": "send_refund", "description": "Sends a refund", "tags": ["send_refund"],
                                "status": True, "approval_actions": ["approve", "reject"]})
        out = chat_output("ChatOutput-ag004")
        flow = await upload(api, lf_flow(unique("Refund agent"), [ci, ag, pay, out], [
            lf_edge(ci, "message", ag, "input_value"), lf_edge(pay, "component_as_tool", ag, "tools"),
            lf_edge(ag, "response", out, "input_value")]))
        paused = await run(api, flow["id"], "refund 5 EUR", session_id="ag")
        assert paused["status"] == "suspended", paused
        job_id = paused["job_id"]
        request = paused["human_request"]
        assert request["kind"] == "tool_approval" and request["request_id"] == f"Agent-ag002:{job_id}:1"
        assert request["allowed_decisions"] == ["approve", "reject"] and target.hits == []
        assert llm.requests[0]["tools"][0]["function"]["name"] == "send_refund"
        async with api.client("alice") as c:
            r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                             json={"request_id": request["request_id"], "decision": {"action_id": "approve"}})
            assert r.status_code == 200, r.text
            await api.wait_status(job_id, JobStatus.completed)
            done = (await c.get(f"/api/v2/workflows/{job_id}")).json()
        assert done["output"]["text"] == "Refund of 5 EUR sent."
        assert target.counts == {"/refunds": 1} and llm.count == 2


# ---- Run Flow between two imported flows ------------------------------------------------------


async def test_run_flow_between_two_imported_flows_by_name(api: Harness) -> None:
    child_name = unique("Shouter")
    ci, pr, co = chat_input("ChatInput-c0001"), prompt("Prompt-c0003", "{said}!!"), chat_output("ChatOutput-c0002")
    await upload(api, lf_flow(child_name, [ci, pr, co], [lf_edge(ci, "message", pr, "said"),
                                                           lf_edge(pr, "prompt", co, "input_value")]))
    ask, sub, out = chat_input("ChatInput-p0001"), run_flow("RunFlow-p0002", child_name), chat_output("ChatOutput-p0003")
    parent = await upload(api, lf_flow(unique("Parent"), [ask, sub, out], [
        lf_edge(ask, "message", sub, "ChatInput-c0001~input_value"),
        lf_edge(sub, "ChatOutput-c0002~message", out, "input_value")]))
    done = await run(api, parent["id"], "hello")
    assert done["status"] == "completed", done
    assert done["output"]["text"] == "hello!!"
    async with api.client("bob") as c:  # bob's own copy of the parent finds no child of that name he may run
        r = await c.post("/api/v1/flows", json=lf_flow(unique("Parent"), [ask, sub, out], [
            lf_edge(ask, "message", sub, "ChatInput-c0001~input_value"),
            lf_edge(sub, "ChatOutput-c0002~message", out, "input_value")]))
    failed = await run(api, r.json()["id"], "hello", user="bob")
    assert failed["status"] == "failed" and "no flow named" in json.dumps(failed)


# ---- refusals, the round trip, SIGNOFF_FLOWS_DIR, the CLI -----------------------------------


async def test_an_unsupported_component_is_a_422_listing_each_node_and_nothing_is_imported(api: Harness) -> None:
    ci = chat_input("ChatInput-un001", files="report.pdf")
    vec = lf_node("Chroma-un002", "Chroma", {"collection_name": "docs"}, display="Chroma DB",
                  outputs=[("search_results", "Search Results", ["Data"])])
    pr = prompt("Prompt-un003", "Use {context}")
    out = chat_output("ChatOutput-un004")
    doc = lf_flow(unique("Unsupported"), [ci, vec, pr, out], [
        lf_edge(ci, "message", vec, "search_query"), lf_edge(vec, "search_results", pr, "context"),
        lf_edge(pr, "prompt", out, "input_value")])
    async with api.client("alice") as c:
        before = len((await c.get("/api/v1/flows")).json())
        r = await c.post("/api/v1/flows", json=doc)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail["code"] == "FLOW_INVALID" and detail["error"] == "LangflowUnsupported"
        assert {(p["node"], p["langflow_type"], p["display_name"]) for p in detail["problems"]} == {
            ("ChatInput-un001", "ChatInput", "Chat Input"), ("Chroma-un002", "Chroma", "Chroma DB")}
        assert any("files" in p["message"] for p in detail["problems"])
        assert {"type": "HumanInput", "display_name": "Human Input"} in detail["supported"]
        assert "Chroma" in detail["message"] and "Agent (Agent)" in detail["message"]
        assert len((await c.get("/api/v1/flows")).json()) == before


async def test_export_and_import_back_give_the_same_spec(api: Harness, llm: FakeOpenAI) -> None:
    first = await upload(api, memory_chatbot(llm))
    async with api.client("alice") as c:
        r = await c.get(f"/api/v1/flows/{first['id']}/export", params={"format": "langflow"})
        assert r.status_code == 200, r.text
        assert r.headers["content-disposition"].startswith("attachment; filename=")
        exported = r.json()
        assert exported["data"]["nodes"][0]["data"]["type"] == "Memory" and "code" not in r.text
        again = await c.post("/api/v1/flows", json=exported)
        assert again.status_code == 201, again.text
        assert again.json()["spec"] == first["spec"]
        own = await c.get(f"/api/v1/flows/{first['id']}/export", params={"format": "signoff"})
        assert own.json() == first["spec"]
        assert (await c.get(f"/api/v1/flows/{first['id']}/export", params={"format": "xml"})).status_code == 422
    async with api.client("bob") as c:
        assert (await c.get(f"/api/v1/flows/{first['id']}/export")).status_code == 404


async def test_signoff_flows_dir_takes_a_langflow_export(api: Harness, tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    ci, words, pr, out = (chat_input("ChatInput-fd001"), text_input("TextInput-fd002", "from the folder"),
                          prompt("Prompt-fd003", "{a}: {b}"), text_output("TextOutput-fd004"))
    (folder / "langflow-greeter.json").write_text(json.dumps(lf_flow("Greeter", [ci, words, pr, out], [
        lf_edge(ci, "message", pr, "a"), lf_edge(words, "text", pr, "b"), lf_edge(pr, "prompt", out, "input_value")])))
    bad = lf_flow("Bad", [lf_node("Pinecone-fd005", "Pinecone", {"index_name": "x"})], [])
    (folder / "langflow-bad.json").write_text(json.dumps(bad))
    settings = api.settings.model_copy(update={"flows_dir": folder})
    report = await sync_flows_dir(api.store, settings, await public_owner_id(api.store))
    assert "langflow-greeter" in report["added"] + report["updated"] and "langflow-bad" in report["invalid"]
    done = await run(api, "langflow-greeter", "bob says", user="bob")
    assert done["output"]["text"] == "bob says: from the folder"


async def test_the_cli_imports_several_files_and_exports(api: Harness, live: str, tmp_path: Path) -> None:
    from signoff.cli import main

    good = tmp_path / "approval.json"
    good.write_text(json.dumps(approval_flow()))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(lf_flow("Bad", [lf_node("Weaviate-cl001", "Weaviate", {"url": "x"})], [])))
    key = api.users["alice"][1]
    base = ["--api-url", live, "--api-key", key]

    def cli(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        return code, out.getvalue(), err.getvalue()

    code, out, err = await asyncio.to_thread(cli, "flows", "import", str(good), str(bad), *base)
    assert code == 1  # one of the two could not be imported
    flow_id = out.split("\t")[0]
    assert str(good) in out and "Weaviate-cl001" in err and "FLOW_INVALID" in err
    target = tmp_path / "out.json"
    code, _, err = await asyncio.to_thread(cli, "flows", "export", flow_id, "-o", str(target), *base)
    assert code == 0, err
    exported = json.loads(target.read_text())
    assert {n["id"] for n in exported["data"]["nodes"]} >= {"HumanInput-x8Kq2", "ChatInput-abc12"}
    code, out, err = await asyncio.to_thread(cli, "flows", "import", str(target), *base)
    assert code == 0, err
    async with api.client("alice") as c:
        specs = [(await c.get(f"/api/v1/flows/{i}")).json()["spec"] for i in (flow_id, out.split("\t")[0])]
    assert specs[0] == specs[1]
