"""One trace per run (DESIGN §1 invariant 5), with the OpenTelemetry API only.

The trace id is derived from the run id (a uuid is its own 128-bit trace id), and every span
id that matters is derived too, so the spans written before a pause and after a resume, by
different activities, workers or processes, land in one trace, and a retried activity
rewrites the same spans instead of adding new ones (the store upserts by span id):

- the **root** span of the run: ``root_span_id(run_id)``. Every process that starts or
  resumes a run attaches :func:`run_context` (a non-recording stand-in for the root) so
  Temporal's client spans, and through its headers the workflow and activity spans, join the
  trace. :func:`open_run` writes a provisional root to the store when the run starts (so the
  trace lists as running); :func:`close_run` emits the real root span when the run ends.
- a span per built vertex (:class:`RunTracer`, plugged into ``RunContext.wrap_build`` and
  ``on_vertex_built``): component type, inputs and outputs truncated to a bound, error status
  when the component fails. A Human Input build that pauses, and its rebuild once decided, are
  not vertex spans: the gate span stands for them.
- the **gate** span ``Human In The Loop — {label}`` (:func:`record_gate`), from the pause to the
  decision, with the action id, who decided and the rerouted action as attributes.

Span ids are requested through :data:`requested_ids`; the SDK side (:mod:`.sdk`, installed by
each process) has an id generator that honours them. Without it spans still form one trace
(the parent carries the trace id) but retried builds get fresh ids.

Modules: :mod:`.ids` (ids and contexts), :mod:`.attributes` (span attributes, bounded values,
the gate's name), :mod:`.spans` (root and gate spans, flush), :mod:`.vertex` (vertex, model and
tool spans), :mod:`.runs` (a run driven in one process), :mod:`.sdk` (the OpenTelemetry SDK:
install, the span sink, :func:`~.sdk.collect_spans`).
"""

from signoff.engine.tracing.attributes import (
    A_COMPONENT,
    A_FLOW,
    A_INPUTS,
    A_JOB,
    A_KIND,
    A_OUTPUTS,
    A_PARENT,
    A_RUN,
    A_VERTEX,
    GATE_PREFIX,
    MAX_VALUE_CHARS,
    bounded,
    gate_label,
    gate_span_name,
)
from signoff.engine.tracing.ids import (
    TRACER_NAME,
    RequestedIds,
    hex_span,
    hex_trace,
    requested_ids,
    root_context,
    root_span_id,
    run_context,
    span_id_for,
    trace_id_for,
    tracer,
)
from signoff.engine.tracing.runs import RunTracing
from signoff.engine.tracing.spans import close_run, flush, flusher, open_run, record_gate, run_root
from signoff.engine.tracing.vertex import ChildSpan, RunTracer, model_call, tool_call

__all__ = [
    "A_COMPONENT", "A_FLOW", "A_INPUTS", "A_JOB", "A_KIND", "A_OUTPUTS", "A_PARENT", "A_RUN", "A_VERTEX",
    "ChildSpan", "GATE_PREFIX", "MAX_VALUE_CHARS", "RequestedIds", "RunTracer", "RunTracing", "TRACER_NAME",
    "bounded", "close_run", "flush", "flusher", "gate_label", "gate_span_name", "hex_span", "hex_trace", "model_call",
    "open_run", "record_gate", "run_root", "requested_ids", "root_context", "root_span_id", "run_context", "span_id_for",
    "tool_call", "trace_id_for", "tracer",
]
