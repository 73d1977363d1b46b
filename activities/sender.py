"""Who sent a decision through Temporal (DESIGN §9): recorded beside the person it was made for.

The SDK tells a workflow an Update's id and name, not the identity of the client that sent it.
The worker hands it to the workflow from the activation (:mod:`signoff.workflows.caller`), which
passes it to the decision's activity (``client_identity``). The decision's event (and a vote's)
carries:

- ``via``: ``"api"`` when signoff's API sent it for the person it authenticated (it sets
  ``decided_by`` and no ``user``), or the surface or protocol of the API it came through
  (``page``, ``agui``, ``email``, ``slack``, ``mcp``, ``a2a``: VIAS); ``"temporal"`` when a
  Temporal client sent it, naming the person (``user``) or not (the run's owner);
- ``client_identity``: the Temporal client's identity as Temporal recorded it (the API's own
  client for ``"api"``; ``temporal --identity ...``, an SDK client's ``identity``), None when it
  sent none.
"""

from __future__ import annotations

from typing import Any

from signoff.activities.types import RecordVoteInput, ResumeRunInput


# what ``via`` may name besides "api" and "temporal" (anything else, e.g. sent by a Temporal
# client that set it, is recorded as the module docstring says)
VIAS = frozenset({"page", "agui", "email", "slack", "mcp", "a2a"})


def sender(inp: ResumeRunInput | RecordVoteInput) -> dict[str, Any]:
    """``{"via", "client_identity"}`` of a decision (or vote) being applied (module docstring),
    and the Update that carried it."""
    via = "api" if inp.decided_by and inp.user is None else "temporal"
    if via == "api" and inp.via in VIAS:
        via = inp.via
    sent: dict[str, Any] = {"via": via, "client_identity": inp.client_identity or None}
    if inp.update_id is not None:
        sent["update_id"] = inp.update_id
    return sent
