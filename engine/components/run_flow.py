"""Run Flow: runs another flow by id, in-process, as a nested run."""

from __future__ import annotations

from typing import Any

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef
from signoff.engine.errors import ComponentError

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
        run = ctx.run
        flow_id = self.params["flow_id"]
        if run.depth >= MAX_DEPTH:
            raise ComponentError(f"RunFlow: flows nested deeper than {MAX_DEPTH} levels (a flow running itself?)", vertex_id=ctx.vertex_id)
        if run.flow_loader is None or run.run_child is None:
            raise ComponentError("RunFlow: no flow loader is configured", vertex_id=ctx.vertex_id)
        flow = await run.flow_loader(flow_id)  # None too when the run's user may not execute it
        if flow is None:
            raise ComponentError(f"RunFlow: flow '{flow_id}' not found, or you may not run it", vertex_id=ctx.vertex_id)
        value = ctx.inputs.get("input_value")
        if value is None:
            value = self.params.get("input_value", run.input_value)
        # The child writes no chat history: the parent's session shows the parent's messages only.
        result = await run.run_child(run, flow, value, vertex_id=ctx.vertex_id)
        return {"output": result["output"]["text"]}
