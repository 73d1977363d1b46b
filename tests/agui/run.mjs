// One AG-UI run of a signoff flow by the real @ag-ui/client (HttpAgent), for
// tests/integration/agui/test_agui_client.py.
//
// stdin: {url, apiKey, threadId, messages?, pendingInterrupts?, message?, resume?}
//   - messages / pendingInterrupts: the client's state from its previous run (a real client
//     keeps them between runs; the test carries them from one process to the next)
//   - message: a user message added before the run
//   - resume: [{interruptId?, status, payload?}] (interruptId defaults to the pending one)
// stdout: {events, error, result, pendingInterrupts, messages, outcomes}
//   - events: every event the client's pipeline delivered (after its own verification)
//   - error: the message of a run that failed in the client (RUN_ERROR, or a protocol violation)
import { HttpAgent } from "@ag-ui/client";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";

const plan = JSON.parse(readFileSync(0, "utf8"));
const agent = new HttpAgent({
  url: plan.url,
  headers: { "x-api-key": plan.apiKey },
  threadId: plan.threadId,
  initialMessages: plan.messages ?? [],
});
agent.pendingInterrupts = plan.pendingInterrupts ?? [];
if (plan.message !== undefined) {
  agent.addMessage({ id: randomUUID(), role: "user", content: plan.message });
}

const events = [];
const outcomes = [];
let error = null;
let result;
const params = {};
if (plan.resume) {
  params.resume = plan.resume.map((r) => ({
    interruptId: r.interruptId ?? agent.pendingInterrupts[0]?.id,
    status: r.status,
    ...(r.payload !== undefined ? { payload: r.payload } : {}),
  }));
}
try {
  const done = await agent.runAgent(params, {
    onEvent: ({ event }) => {
      events.push(event);
    },
    onRunFinishedEvent: (p) => {
      outcomes.push(p.outcome);
    },
    onRunErrorEvent: ({ event }) => {
      outcomes.push("error");
      error = `${event.code}: ${event.message}`;
    },
  });
  result = done.result;
} catch (e) {
  error = error ?? String(e?.message ?? e);
}
process.stdout.write(
  JSON.stringify({
    events,
    error,
    result: result ?? null,
    outcomes,
    pendingInterrupts: agent.pendingInterrupts,
    messages: agent.messages,
  }),
);
