"""The activities' patient store: an outage is waited out (the call sent again with backoff), any
other error is raised at once, and neither an outage nor a call hanging on a quiet connection is
waited on past SIGNOFF_STORE_OUTAGE_SECONDS."""

from __future__ import annotations

import asyncio

import pytest

from signoff.activities.patient import PatientStore
from signoff.engine.store.base import StoreConflict, StoreUnavailable


class Flaky:
    def __init__(self, fail: list[BaseException | None]) -> None:
        self.fail, self.calls = fail, 0

    async def get_job(self, job_id: str) -> str:
        self.calls += 1
        err = self.fail.pop(0) if self.fail else None
        if err is not None:
            raise err
        return job_id

    async def hang(self) -> None:
        self.calls += 1
        await asyncio.sleep(3600)


async def test_an_outage_is_waited_out_and_the_call_goes_through() -> None:
    inner = Flaky([StoreUnavailable("down"), StoreUnavailable("down")])
    assert await PatientStore(inner, 30, max_delay=0.05).get_job("j") == "j"
    assert inner.calls == 3


async def test_other_errors_are_raised_at_once() -> None:
    inner = Flaky([StoreConflict("taken")])
    with pytest.raises(StoreConflict):
        await PatientStore(inner, 30).get_job("j")
    assert inner.calls == 1


async def test_an_outage_longer_than_the_wait_is_raised() -> None:
    inner = Flaky([StoreUnavailable("down")] * 100)
    with pytest.raises(StoreUnavailable):
        await PatientStore(inner, 0.5, max_delay=0.05).get_job("j")
    assert 1 < inner.calls < 100


async def test_a_call_hanging_on_a_quiet_connection_ends_as_unavailable() -> None:
    inner = Flaky([])
    with pytest.raises(StoreUnavailable, match="in time"):
        await asyncio.wait_for(PatientStore(inner, 0.5).hang(), 10)
