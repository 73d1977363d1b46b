"""What waits for a person, as the inbox lists it (the page and its live stream): one row per
waiting request, and the inbox's filters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.engine.decisions import deadline
from signoff.engine.models import InboxEntry, Job, PendingRequest
from signoff.engine.store.base import Store

from signoff.api.pages.views import Names


@dataclass
class InboxItem:
    job: Job
    request: PendingRequest
    flow_name: str
    owner_name: str
    mine: bool
    deadline: datetime | None
    standing: Any = None  # api/pages/rules.Standing, set by rules.mark: where the reader stands

    @property
    def may_decide(self) -> bool:
        return self.standing is None or self.standing.may_decide

    @property
    def kind_label(self) -> str:
        return "Tool approval" if self.request.kind == "tool_approval" else "Gate"

    @property
    def quick(self) -> bool:
        """Whether its options can be chosen from the list (nothing to type)."""
        if self.request.kind == "tool_approval" or not self.may_decide:
            return False
        fields = self.request.fields or {}
        return not any((fields.get(o.action_id) or {}).get("required") for o in self.request.options)

    @property
    def key(self) -> str:
        return self.request.request_id


async def inbox_items(names: Names, jobs: list[Job], me: str) -> list[InboxItem]:
    out = []
    for job in jobs:
        if job.pending is None:
            continue
        out.append(InboxItem(job=job, request=job.pending, flow_name=await names.flow_name(job.flow_id),
                             owner_name=await names.user(job.user_id), mine=job.user_id == me,
                             deadline=deadline(job.pending)))
    return out


def filter_inbox(entries: list[InboxEntry], *, flow: str | None, session: str | None,
                 kind: str | None) -> list[InboxEntry]:
    """The entries the inbox's filters keep (as Store.inbox filters: the session is the job's own,
    "" for none)."""
    def keep(e: InboxEntry) -> bool:
        if flow and e.flow_id != flow:
            return False
        if session and (e.session_id or "") != session:
            return False
        if kind and e.kind != kind:
            return False
        return True

    return [e for e in entries if keep(e)]


async def inbox_item(names: Names, store: Store, entry: InboxEntry, me: str) -> InboxItem | None:
    """The row of ``entry`` to draw: its job read now, None when it no longer waits for that request."""
    job = await store.get_job(entry.job_id)
    if job is None or job.pending is None or job.pending.request_id != entry.request_id:
        return None
    items = await inbox_items(names, [job], me)
    return items[0] if items else None


SEARCH_MAX = 200  # characters of a search (``q``): a plain, case-insensitive substring, never a pattern
SEARCH_INPUT = 20_000  # characters of a run's input a search reads


def search_text(query: str | None) -> str | None:
    """The search as it is matched: printable, trimmed, at most SEARCH_MAX characters, lower case."""
    if not query:
        return None
    text = "".join(c for c in query if c.isprintable()).strip()[:SEARCH_MAX]
    return text.casefold() or None


def matches(item: InboxItem, needle: str) -> bool:
    """Whether the row's run input, flow name, session or question holds ``needle`` (search_text's)."""
    haystack = (str(item.job.request.get("input_value") or "")[:SEARCH_INPUT], item.flow_name,
                item.job.session_id or "", item.request.prompt or "")
    return any(needle in part.casefold() for part in haystack)


def by_deadline(items: list[InboxItem]) -> list[InboxItem]:
    """Soonest deadline first, those without one last; ties (and the rest) in the order given."""
    return sorted(items, key=lambda i: (i.deadline is None, i.deadline.timestamp() if i.deadline else 0.0))


def by_flow(items: list[InboxItem]) -> list[InboxItem]:
    """Grouped by flow (flows by name), each group in the order given."""
    return sorted(items, key=lambda i: (i.flow_name.casefold(), i.job.flow_id))
