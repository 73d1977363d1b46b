"""Prompt: a template whose ``{variables}`` become inputs."""

from __future__ import annotations

import string
from typing import Any

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text
from signoff.engine.errors import ComponentError


def template_variables(template: Any) -> tuple[list[str], list[str]]:
    """(variables in order of first use, problems)."""
    if not isinstance(template, str):
        return [], []
    names: list[str] = []
    problems: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        return [], [f"template: {e} (write {{{{ and }}}} for literal braces)"]
    for _, field_name, format_spec, conversion in parsed:
        if field_name is None:
            continue
        if not field_name.isidentifier():
            problems.append(f"template: '{{{field_name}}}' is not a valid variable name (letters, digits, _)")
            continue
        if format_spec or conversion:
            problems.append(f"template: '{{{field_name}}}' must not carry a format spec or conversion")
        if field_name not in names:
            names.append(field_name)
    return names, problems


@register
class Prompt(Component):
    type_name = "Prompt"
    instant = True
    display_name = "Prompt"
    description = "Fills a template; each {variable} is an input."
    outputs = [OutputDef("prompt")]
    params = [ParamDef("template", "str", required=True)]

    @classmethod
    def input_defs(cls, params: dict[str, Any]) -> list[InputDef]:
        names, _ = template_variables(params.get("template"))
        return [InputDef(n, required=True) for n in names if n != "template"]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params)
        names, more = template_variables(params.get("template"))
        if "template" in names:
            more.append("template: the variable name 'template' is reserved")
        return problems + more

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        template = self.params["template"]
        names, _ = template_variables(template)
        values = {n: as_text(self.value(ctx, n, "")) for n in names}
        # the size before it is made: a template repeating a variable ("{x}{x}{x}...") over a
        # large input, or prompts chained to double each time, must not fill the worker's memory
        size = len(template) + sum(len(values[n]) * template.count("{" + n + "}") for n in names)
        if size > ctx.run.max_output_bytes:
            raise ComponentError(f"Prompt '{ctx.vertex_id}': the prompt would be {size} characters, over "
                                 f"{ctx.run.max_output_bytes} (SIGNOFF_MAX_OUTPUT_BYTES)", vertex_id=ctx.vertex_id)
        return {"prompt": template.format(**values)}
