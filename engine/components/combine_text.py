"""Combine Text: two texts joined by a delimiter (Langflow's Combine Text)."""

from __future__ import annotations

from typing import Any

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text
from signoff.engine.errors import ComponentError


@register
class CombineText(Component):
    type_name = "CombineText"
    instant = True
    display_name = "Combine Text"
    description = "Joins two texts with a delimiter (default: one space)."
    inputs = [InputDef("text1"), InputDef("text2"), InputDef("delimiter")]
    outputs = [OutputDef("combined_text")]
    params = [ParamDef("delimiter", "str", default=" ")]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        first, second = as_text(self.value(ctx, "text1", "")), as_text(self.value(ctx, "text2", ""))
        delimiter = as_text(self.value(ctx, "delimiter", " "))
        size = len(first) + len(delimiter) + len(second)
        if size > ctx.run.max_output_bytes:
            raise ComponentError(f"CombineText '{ctx.vertex_id}': the text would be {size} characters, over "
                                 f"{ctx.run.max_output_bytes} (SIGNOFF_MAX_OUTPUT_BYTES)", vertex_id=ctx.vertex_id)
        return {"combined_text": delimiter.join([first, second])}
