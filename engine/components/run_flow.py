"""Run Flow: runs another flow by id, in-process, as a nested run."""

from __future__ import annotations

from typing import Any

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text
from signoff.engine.errors import ComponentError, FlowInvalid, NestedGateError

MAX_DEPTH = 5


@register
class RunFlow(Component):
    type_name = "RunFlow"
    display_name = "Run Flow"
    description = "Runs another flow with the input and outputs its result text."
    tool_capable = True
    inputs = [InputDef("input_value")]
    outputs = [OutputDef("output")]
    params = [ParamDef("flow_id", "str", required=True)]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        from signoff.engine.graph import Graph
        from signoff.engine.run import new_run_state, run_to_end
        from signoff.engine.spec import flow_has_gate, parse_and_validate

        run = ctx.run
        flow_id = self.params["flow_id"]
        if run.depth >= MAX_DEPTH:
            raise ComponentError(f"RunFlow: flows nested deeper than {MAX_DEPTH} levels (a flow running itself?)", vertex_id=ctx.vertex_id)
        if run.flow_loader is None:
            raise ComponentError("RunFlow: no flow loader is configured", vertex_id=ctx.vertex_id)
        spec_dict = await run.flow_loader(flow_id)
        if spec_dict is None:
            raise ComponentError(f"RunFlow: flow '{flow_id}' not found", vertex_id=ctx.vertex_id)
        try:
            spec = parse_and_validate(spec_dict)
        except FlowInvalid as e:
            raise ComponentError(f"RunFlow: flow '{flow_id}' is not valid: {e.problems}", vertex_id=ctx.vertex_id) from None
        if flow_has_gate(spec):
            raise NestedGateError(
                f"RunFlow '{ctx.vertex_id}': flow '{flow_id}' contains an approval gate and cannot run as a nested "
                "flow; move the approval to the parent flow.",
                vertex_id=ctx.vertex_id,
                flow_id=flow_id,
            )
        value = ctx.inputs.get("input_value")
        if value is None:
            value = self.params.get("input_value", run.input_value)
        # The child writes no chat history: the parent's session shows the parent's messages only.
        child_ctx = run.child(
            run_id=f"{run.run_id}.{ctx.vertex_id}", flow_id=flow_id, input_value=as_text(value), history=None
        )
        graph = Graph.from_spec(spec)
        state = new_run_state(
            spec,
            run_id=child_ctx.run_id,
            job_id=run.job_id,
            flow_id=flow_id,
            user_id=run.user_id,
            session_id=run.session_id,
            input_value=child_ctx.input_value,
        )
        state, result = await run_to_end(graph, state, child_ctx)
        if state.pending is not None:  # an Agent tool approval inside: the gate check missed it
            raise NestedGateError(vertex_id=ctx.vertex_id, flow_id=flow_id)
        return {"output": result["output"]["text"]}
