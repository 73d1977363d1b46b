"""The inbox's live updates: one watcher per process reads each person's inbox once per tick,
however many of their inboxes are open, and hands it to every stream (api/pages/live.py)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from signoff.api.pages import live


class FakeService:
    """pending_for counted; what waits is empty (the diffing is the browser tests' business)."""

    def __init__(self) -> None:
        self.store = SimpleNamespace()
        self.calls: dict[str, int] = {}

    async def pending_for(self, user: Any, flow_id: str | None = None) -> list[Any]:
        self.calls[user.id] = self.calls.get(user.id, 0) + 1
        return []


def event(chunk: bytes) -> tuple[str, dict[str, Any]]:
    head, data = chunk.decode().strip().split("\n")
    return head.removeprefix("event: "), json.loads(data.removeprefix("data: "))


async def test_one_read_per_person_per_tick_however_many_inboxes() -> None:
    service = FakeService()
    watcher = live.InboxWatcher(service, poll=0.05)  # type: ignore[arg-type]
    alice, bob = SimpleNamespace(id="alice"), SimpleNamespace(id="bob")

    async def render(item: Any) -> str:
        return ""

    streams = [live.inbox_stream(watcher, who, flow=None, session=None, kind=None, add_rows=True,
                                 render_row=render, keepalive=0.02)
               for who in (alice, alice, alice, bob, bob)]
    for s in streams:
        assert event(await s.__anext__()) == ("snapshot", {"ids": [], "count": 0, "total": 0})
    assert watcher.streams == 5
    first = dict(service.calls)  # each stream's own first read
    assert first == {"alice": 3, "bob": 2}
    reads = watcher.reads
    await asyncio.sleep(0.5)
    ticks = (watcher.reads - reads) / 2
    assert ticks >= 3
    # the watcher read each person once a tick; the streams read nothing themselves
    assert service.calls["alice"] - first["alice"] == service.calls["bob"] - first["bob"] == ticks
    assert await streams[0].__anext__() == live.KEEPALIVE  # nothing changed: keep-alives only

    for s in streams:
        await s.aclose()
    assert watcher.streams == 0
    await asyncio.sleep(0.15)
    assert watcher._task is not None and watcher._task.done()  # no open inbox, no reads
    reads = watcher.reads
    await asyncio.sleep(0.15)
    assert watcher.reads == reads


async def test_inboxes_opened_at_once_share_one_read() -> None:
    service = FakeService()
    gate = asyncio.Event()
    plain = service.pending_for

    async def slow(user: Any, flow_id: str | None = None) -> list[Any]:
        await gate.wait()
        return await plain(user, flow_id)

    service.pending_for = slow  # type: ignore[method-assign]
    watcher = live.InboxWatcher(service, poll=10)  # type: ignore[arg-type]
    alice = SimpleNamespace(id="alice")

    async def render(item: Any) -> str:
        return ""

    streams = [live.inbox_stream(watcher, alice, flow=None, session=None, kind=None, add_rows=True,
                                 render_row=render) for _ in range(20)]
    firsts = [asyncio.ensure_future(s.__anext__()) for s in streams]
    await asyncio.sleep(0.05)
    firsts[0].cancel()  # one page closes while the read is under way: the others still get it
    gate.set()
    got = await asyncio.gather(*firsts[1:])
    assert all(event(chunk)[0] == "snapshot" for chunk in got)
    assert service.calls == {"alice": 1}
    for s in streams:
        await s.aclose()
