"""engine/audit/events.py: the hash of an event and the check of a run's chain, on events as a
client gets them from the API (dicts, ISO times), without a store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from signoff.engine.audit.events import canonical_at, event_sha256, verify_chain, verify_events

T0 = datetime(2026, 12, 3, 12, 0, 0, 123456, tzinfo=timezone.utc)


def chain(n: int, job_id: str = "job-1") -> list[dict]:
    out, prev = [], None
    for seq in range(1, n + 1):
        at = (T0 + timedelta(seconds=seq)).isoformat().replace("+00:00", "Z")
        data = {"seq": seq, "nested": {"b": [1, 2.5, None], "a": "é"}}
        sha = event_sha256(job_id, seq, "progress", data, at, prev)
        out.append({"seq": seq, "event": "progress", "data": data, "created_at": at, "sha256": sha, "prev_sha256": prev})
        prev = sha
    return out


def test_any_rendering_of_the_same_instant_hashes_the_same() -> None:
    assert canonical_at("2026-12-03T12:00:00.123456Z") == canonical_at(T0) == canonical_at(
        T0.astimezone(timezone(timedelta(hours=2)))) == "2026-12-03T12:00:00.123456+00:00"
    assert event_sha256("j", 1, "e", {"b": 1, "a": 2}, T0, None) == event_sha256("j", 1, "e", {"a": 2, "b": 1},
                                                                               "2026-12-03T12:00:00.123456Z", None)


def test_a_clean_chain_verifies_and_every_field_counts() -> None:
    events = chain(5)
    result = verify_chain(events, job_id="job-1", last_seq=5)
    assert result.ok and result.checked == 5 and result.head == events[-1]["sha256"]
    base = event_sha256("j", 1, "e", {}, T0, None)
    assert len({base, event_sha256("k", 1, "e", {}, T0, None), event_sha256("j", 2, "e", {}, T0, None),
                event_sha256("j", 1, "f", {}, T0, None), event_sha256("j", 1, "e", {"x": 1}, T0, None),
                event_sha256("j", 1, "e", {}, T0 + timedelta(microseconds=1), None),
                event_sha256("j", 1, "e", {}, T0, "0" * 64)}) == 7


def test_another_runs_id_breaks_the_chain() -> None:
    found = verify_events(chain(2), job_id="job-2")
    assert found is not None and (found.seq, found.kind) == (1, "changed")


def test_each_kind_of_break_is_named_at_its_seq() -> None:
    events = chain(5)
    changed = [dict(e) for e in events]
    changed[1]["data"] = {"seq": 2, "nested": {}}
    removed = events[:2] + events[3:]
    reordered = events[:2] + [dict(events[3], seq=3), dict(events[2], seq=4)] + events[4:]
    duplicate = events[:3] + [events[2]] + events[3:]
    found = {name: verify_events(evs, job_id="job-1", last_seq=5) for name, evs in
             (("changed", changed), ("removed", removed), ("reordered", reordered), ("truncated", events[:3]),
              ("duplicate", duplicate))}
    assert {k: (b.seq, b.kind) for k, b in found.items() if b} == {
        "changed": (2, "changed"), "removed": (3, "removed"), "reordered": (3, "reordered"),
        "truncated": (4, "truncated"), "duplicate": (3, "reordered")}


def test_events_without_a_hash_before_the_chain_are_counted_after_it_are_a_break() -> None:
    events = chain(3)
    legacy = [{"seq": 1, "event": "x", "data": {}, "created_at": T0, "sha256": None, "prev_sha256": None}]
    first = event_sha256("job-1", 2, "progress", {}, T0, None)
    later = legacy + [{"seq": 2, "event": "progress", "data": {}, "created_at": T0, "sha256": first,
                       "prev_sha256": None}]
    result = verify_chain(later, job_id="job-1")
    assert result.ok and (result.checked, result.unchained) == (1, 1)
    stripped = events[:2] + [dict(events[2], sha256=None)]
    found = verify_events(stripped, job_id="job-1")
    assert found is not None and (found.seq, found.kind) == (3, "unchained")


def test_malformed_events_are_a_break_not_a_crash() -> None:
    assert verify_events([{"seq": "1", "job_id": "j"}]).kind == "malformed"  # type: ignore[union-attr]
    bad = dict(chain(1)[0], created_at="not a time")
    assert verify_events([bad], job_id="job-1").kind == "malformed"  # type: ignore[union-attr]


def test_a_document_nested_beyond_recursion_is_malformed() -> None:
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]
    event = {"seq": 1, "event": "e", "data": deep, "created_at": T0, "sha256": "0" * 64, "prev_sha256": None}
    assert verify_events([event], job_id="j").kind == "malformed"  # type: ignore[union-attr]


def test_the_hash_put_together_from_canonical_data_is_the_canonical_json_of_the_whole_event() -> None:
    import hashlib

    from signoff.engine.audit.events import canonical_json, chained_sha256

    for job_id, event, data, prev in (("j", "e", {}, None), ('jo"b\u2028é', "ev\n", {"z": [1.5, None], "a": "\ud7ff"},
                                                              "ab" * 32)):
        whole = canonical_json({"job_id": job_id, "seq": 7, "event": event, "data": data, "at": canonical_at(T0),
                                "prev_sha256": prev})
        expected = hashlib.sha256(whole.encode()).hexdigest()
        assert chained_sha256(job_id, 7, event, canonical_json(data), T0, prev) == expected
        assert event_sha256(job_id, 7, event, data, T0, prev) == expected
