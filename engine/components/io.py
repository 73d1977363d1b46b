"""Inputs and outputs of a flow: ChatInput, TextInput, ChatOutput, TextOutput."""

from __future__ import annotations

import uuid
from typing import Any

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text
from signoff.engine.models import Message


def message_id(run_id: str, vertex_id: str, kind: str) -> str:
    """Deterministic, so a retried build stores the same message again, not a second one."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"signoff:{run_id}/{vertex_id}/{kind}"))


async def store_message(ctx: BuildContext, sender: str, sender_name: str, text: str) -> dict[str, Any]:
    """Store the vertex's chat message in the session history (when the run keeps one) and
    return it as the vertex's ``message`` output. The id is deterministic (message_id)."""
    run = ctx.run
    msg = Message(
        id=message_id(run.run_id, ctx.vertex_id, "user" if sender == "User" else "machine"),
        session_id=run.effective_session,
        flow_id=run.flow_id,
        job_id=run.job_id,
        sender=sender,
        sender_name=sender_name,
        text=text,
        created_at=run.now(),
    )
    if run.history is not None:
        run.budget.spend_output(text, vertex_id=ctx.vertex_id)  # what the run stores, before it is stored
        await run.history.add_message(msg)
    return {"message": message_value(msg)}


def message_value(msg: Message) -> dict[str, Any]:
    return {
        "text": msg.text,
        "sender": msg.sender,
        "sender_name": msg.sender_name,
        "session_id": msg.session_id,
        "id": msg.id,
    }


@register
class ChatInput(Component):
    type_name = "ChatInput"
    instant = True
    tweakable = ("input_value", "sender_name")
    display_name = "Chat Input"
    description = "The run's input as a User message, stored in the session history."
    outputs = [OutputDef("message")]
    params = [
        ParamDef("input_value", "str", description="Default: the run's input."),
        ParamDef("sender_name", "str", default="User"),
    ]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        text = self.params.get("input_value")
        if text is None:
            text = as_text(ctx.run.input_value)
        return await store_message(ctx, "User", self.params.get("sender_name") or "User", text)


@register
class TextInput(Component):
    type_name = "TextInput"
    instant = True
    tweakable = ("value",)
    display_name = "Text Input"
    description = "A fixed text."
    outputs = [OutputDef("text")]
    params = [ParamDef("value", "str", default="")]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        return {"text": self.params.get("value") or ""}


class _Output(Component):
    terminal = True
    instant = True
    inputs = [InputDef("input_value")]
    params = [ParamDef("text", "str", description="Shown instead of the input when set.")]

    def text_of(self, ctx: BuildContext) -> str:
        fixed = self.params.get("text")
        if fixed is not None:
            return fixed
        return as_text(ctx.inputs.get("input_value") if ctx.inputs.get("input_value") is not None else self.params.get("input_value"))


@register
class ChatOutput(_Output):
    type_name = "ChatOutput"
    output_kind = "message"
    shows = "message"
    display_name = "Chat Output"
    description = "Shows a message to the user and stores it in the session history."
    outputs = [OutputDef("message")]
    params = _Output.params + [ParamDef("sender_name", "str", default="AI"), ParamDef("input_value", "any")]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        return await store_message(ctx, "Machine", self.params.get("sender_name") or "AI", self.text_of(ctx))


@register
class TextOutput(_Output):
    type_name = "TextOutput"
    shows = "text"
    display_name = "Text Output"
    description = "Shows a text."
    outputs = [OutputDef("text")]
    params = _Output.params + [ParamDef("input_value", "any")]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        return {"text": self.text_of(ctx)}
