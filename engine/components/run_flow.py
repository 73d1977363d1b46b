"""Run Flow: runs another flow by id (``flow_id``) or by name among the flows the run's user may
run (``flow_name``, as Langflow's Run Flow picks a flow), in-process, as a nested run."""

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
    params = [
        ParamDef("flow_id", "str", description="The flow to run, by id."),
        ParamDef("flow_name", "str", description="The flow to run, by name (the run user's own flows first, then "
                                                 "those shared with them; the newest of a name)."),
    ]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params)
        if not params.get("flow_id") and not params.get("flow_name"):
            problems.append("missing required param 'flow_id' (or 'flow_name': the flow's name)")
        elif params.get("flow_id") and params.get("flow_name"):
            problems.append("set only one of the params 'flow_id' and 'flow_name'")
        return problems

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        run = ctx.run
        flow_id = self.params.get("flow_id")
        by_name = not flow_id
        ref = flow_id or self.params.get("flow_name") or ""
        if run.depth >= MAX_DEPTH:
            raise ComponentError(f"RunFlow: flows nested deeper than {MAX_DEPTH} levels (a flow running itself?)", vertex_id=ctx.vertex_id)
        if run.flow_loader is None or run.run_child is None:
            raise ComponentError("RunFlow: no flow loader is configured", vertex_id=ctx.vertex_id)
        # None too when the run's user may not execute it
        flow = await (run.flow_loader(ref, by_name=True) if by_name else run.flow_loader(ref))
        if flow is None:
            what = f"no flow named '{ref}' that you may run" if by_name else f"flow '{ref}' not found, or you may not run it"
            raise ComponentError(f"RunFlow: {what}", vertex_id=ctx.vertex_id)
        value = ctx.inputs.get("input_value")
        if value is None:
            value = self.params.get("input_value", run.input_value)
        # The child writes no chat history: the parent's session shows the parent's messages only.
        result = await run.run_child(run, flow, value, vertex_id=ctx.vertex_id)
        return {"output": result["output"]["text"]}
