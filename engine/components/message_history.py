"""Message History: the session's earlier chat messages as text (Langflow's Message History in
Retrieve mode).

"Earlier" is what the session held before this run: the messages of this flow and session stored
by the same user's earlier runs (Chat Input's User messages, Chat Output's AI messages; gate cards
are not messages). The current run's own messages are left out, so the node reads the same
whether it is built before or after the run's Chat Input, and a rebuild after a pause reads what
the first build read (its output is in the checkpoint anyway)."""

from __future__ import annotations

import string
from typing import Any

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, OutputDef, ParamDef
from signoff.engine.models import Message

ORDERS = ("Ascending", "Descending")
SENDER_TYPES = ("Machine and User", "Machine", "User")
TEMPLATE_KEYS = ("text", "sender", "sender_name", "session_id", "flow_id", "timestamp", "id")
MAX_MESSAGES = 1000


async def earlier_messages(ctx: BuildContext, n_messages: int, *, sender_type: str = "Machine and User",
                           sender_name: str | None = None) -> list[Message]:
    """The last ``n_messages`` messages of the run's session and flow stored by the run's user's
    earlier runs, oldest first. A nested run (no history of its own) has none."""
    run = ctx.run
    history = run.history
    if history is None or n_messages <= 0:
        return []
    get_job = getattr(history, "get_job", None)  # every store has it; ownership is checked per job
    owners: dict[str, bool] = {}
    found: list[Message] = []
    for msg in reversed(await history.list_messages(run.effective_session, flow_id=run.flow_id)):
        if msg.kind != "message" or msg.job_id is None or msg.job_id == run.job_id:
            continue
        if sender_type in ("Machine", "User") and msg.sender != sender_type:
            continue
        if sender_name and msg.sender_name != sender_name:
            continue
        if msg.job_id not in owners:
            job = await get_job(msg.job_id) if get_job is not None else None
            owners[msg.job_id] = job is not None and run.user_id is not None and job.user_id == run.user_id
        if not owners[msg.job_id]:
            continue  # another user's run in a session of the same name: never theirs to read
        found.append(msg)
        if len(found) >= n_messages:
            break
    return list(reversed(found))


def template_problems(template: Any) -> list[str]:
    if not isinstance(template, str):
        return []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        return [f"param 'template': {e} (write {{{{ and }}}} for literal braces)"]
    problems = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in TEMPLATE_KEYS or spec or conversion:
            problems.append(f"param 'template': '{{{name}}}' is not one of "
                            f"{', '.join('{' + k + '}' for k in TEMPLATE_KEYS)}")
    return problems


@register
class MessageHistory(Component):
    type_name = "MessageHistory"
    instant = True  # a read of the store, no external I/O
    display_name = "Message History"
    description = "The session's earlier chat messages (before this run) as text, one per line."
    outputs = [OutputDef("messages_text", "The messages, each formatted by the template.")]
    params = [
        ParamDef("n_messages", "int", default=100, description=f"How many of the latest messages (at most {MAX_MESSAGES})."),
        ParamDef("order", "str", default="Ascending", description="Ascending (oldest first) or Descending."),
        ParamDef("sender_type", "str", default="Machine and User", description="Machine, User or Machine and User."),
        ParamDef("sender_name", "str", description="Only the messages of this sender name."),
        ParamDef("template", "str", default="{sender_name}: {text}",
                 description=f"Each message; keys {', '.join(TEMPLATE_KEYS)}."),
    ]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params)
        n = params.get("n_messages")
        if isinstance(n, int) and not isinstance(n, bool) and not 0 <= n <= MAX_MESSAGES:
            problems.append(f"param 'n_messages' must be between 0 and {MAX_MESSAGES}")
        if isinstance(params.get("order"), str) and params["order"] not in ORDERS:
            problems.append(f"param 'order': '{params['order']}' is not one of {', '.join(ORDERS)}")
        if isinstance(params.get("sender_type"), str) and params["sender_type"] not in SENDER_TYPES:
            problems.append(f"param 'sender_type': '{params['sender_type']}' is not one of {', '.join(SENDER_TYPES)}")
        return problems + template_problems(params.get("template"))

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        p = self.params
        messages = await earlier_messages(ctx, int(p.get("n_messages") or 0), sender_type=p.get("sender_type") or "",
                                          sender_name=p.get("sender_name") or None)
        if p.get("order") == "Descending":
            messages.reverse()
        template = p.get("template") or "{sender_name}: {text}"
        lines = [template.format_map({"text": m.text, "sender": m.sender, "sender_name": m.sender_name,
                                      "session_id": m.session_id, "flow_id": m.flow_id or "",
                                      "timestamp": m.created_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip(), "id": m.id})
                 for m in messages]
        return {"messages_text": "\n".join(lines)}
