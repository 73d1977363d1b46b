"""Current Date: the date and time now, in a time zone (Langflow's Current Date; also the tool an
Agent brings with ``add_current_date_tool``)."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, as_text
from signoff.engine.errors import ComponentError


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name.strip() or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"'{name}' is not a time zone (use an IANA name such as UTC or Europe/Paris)") from None


@register
class CurrentDate(Component):
    type_name = "CurrentDate"
    instant = True  # reads the run's clock; its output is kept like any other
    tool_capable = True
    display_name = "Current Date"
    description = "The current date and time in a time zone (IANA name, default UTC)."
    inputs = [InputDef("timezone", description="An IANA time zone such as Europe/Paris (default UTC).")]
    outputs = [OutputDef("current_date")]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params)
        if isinstance(params.get("timezone"), str):
            try:
                zone(params["timezone"])
            except ValueError as e:
                problems.append(f"param 'timezone': {e}")
        return problems

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        try:
            tz = zone(as_text(self.value(ctx, "timezone", "UTC")))
        except ValueError as e:
            raise ComponentError(f"CurrentDate: {e}", vertex_id=ctx.vertex_id) from None
        now = ctx.now().astimezone(tz)
        return {"current_date": f"Current date and time in {tz.key}: {now.strftime('%Y-%m-%d %H:%M:%S %Z')}"}
