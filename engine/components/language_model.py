"""Language Model: one chat completion (Langflow's Language Model and OpenAI components) through the
same client and key rule as the Agent (``_model.chat_client``; docs/agent.md). The answer is kept
in the checkpoint like any output, so a resumed run never asks the model again."""

from __future__ import annotations

from typing import Any

from signoff.engine.components import register
from signoff.engine.components._model import ENDPOINT_PARAMS, RETRY_PARAMS, chat_client, check_model_params
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text


@register
class LanguageModel(Component):
    type_name = "LanguageModel"
    display_name = "Language Model"
    description = "Answers the input with an OpenAI-compatible chat model (one completion, no tools)."
    tweakable = ("input_value", "system_message")
    inputs = [
        InputDef("input_value", description="The user message (default: the run's input)."),
        InputDef("system_message", description="The system message."),
    ]
    outputs = [OutputDef("text_output", "The model's answer.")]
    params = [
        *ENDPOINT_PARAMS,
        ParamDef("max_tokens", "int", description="Most tokens in the answer (left to the server when unset)."),
        ParamDef("seed", "int", description="Sampling seed (left to the server when unset)."),
        *RETRY_PARAMS,
    ]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params) + check_model_params(params)
        v = params.get("max_tokens")
        if isinstance(v, int) and not isinstance(v, bool) and v < 1:
            problems.append("param 'max_tokens' must be >= 1")
        return problems

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        extra = {k: self.params[k] for k in ("max_tokens", "seed") if self.params.get(k) is not None}
        client = await chat_client(ctx, self.params, who=f"LanguageModel '{ctx.vertex_id}'", extra_body=extra)
        messages: list[dict[str, Any]] = []
        system = as_text(self.value(ctx, "system_message", ""))
        if system:
            messages.append({"role": "system", "content": system})
        task = ctx.inputs.get("input_value")
        if task is None:
            task = self.params.get("input_value", ctx.run.input_value)
        messages.append({"role": "user", "content": as_text(task)})
        with ctx.run.model_call(model=client.model, number=1, endpoint=client.shown_url, messages=messages, tools=[]) as span:
            result = await client.chat(messages)
            span.model_result(result)
        return {"text_output": result.content}
