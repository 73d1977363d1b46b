"""signoff.devserver.free_port: a port below the kernel's ephemeral range (where outgoing
connections take their source ports, which once took a port picked for Temporal before it bound
it), free, never the same twice in a process."""

from __future__ import annotations

import socket

from signoff.devserver import _ephemeral_floor, free_port


def test_free_ports_are_below_the_ephemeral_range_bindable_and_distinct() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(10000 <= p < _ephemeral_floor() for p in ports)
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_handed_out(monkeypatch) -> None:
    import random

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy, busy, 20001, 20002])
        monkeypatch.setattr(random, "randrange", lambda *a: next(picks))
        port = free_port()
    assert port in (20001, 20002)
