"""The soak's short mode (bench/soak.py; issue 17): PostgreSQL, a Temporal dev server, two
`signoff api` and two `signoff worker` processes, a mixed load (gate runs decided through both
APIs and the temporal CLI, stops, supersedes, sync runs, agent tool approvals) while processes
are SIGKILLed and restarted and PostgreSQL and Temporal are restarted once each; then the
auditor: nothing lost, nothing applied twice, every ended run closed everywhere."""

from __future__ import annotations

import pytest

from bench.soak import soak

pytestmark = [pytest.mark.postgres, pytest.mark.temporal]


async def test_a_short_soak_with_chaos_loses_nothing_and_duplicates_nothing() -> None:
    out = await soak(seconds=30, clients=3, kill_every=5, seed=17)
    assert out["problems"] == [], out
    assert out["lost"] == 0 and out["duplicated"] == 0, out
    assert out["kills"] >= 2 and out["restarts"] == {"postgresql": 1, "temporal": 1}, out
    assert out["runs"] >= 15 and set(out["kinds"]) >= {"gate", "sync", "stop"}, out
