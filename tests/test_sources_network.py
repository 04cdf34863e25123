"""The one offline helper of the downloading sources: flags read at call time, probes remembered briefly."""

from __future__ import annotations

import socket

import pytest

from lightning_embinit.init.sources import network


@pytest.fixture
def clock(monkeypatch):
    """A controllable monotonic clock and an empty probe memory."""
    now = [1000.0]
    monkeypatch.setattr(network, "_probes", {})
    monkeypatch.setattr(network.time, "monotonic", lambda: now[0])
    for variable in network.PROXY_VARIABLES + network.OFFLINE_FLAGS:
        monkeypatch.delenv(variable, raising=False)
    return now


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_probe_is_remembered_only_for_a_short_while(clock):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    assert "unreachable" in network.unreachable(url)
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        clock[0] += network.PROBE_TTL_S / 2
        assert "unreachable" in network.unreachable(url)  # still the remembered answer
        clock[0] += network.PROBE_TTL_S
        assert network.unreachable(url) is None  # the network came back
        assert network.offline_reason(url) is None


def test_flags_are_read_at_call_time_and_win_over_the_probe(clock, monkeypatch):
    assert network.offline_flag() is None
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    assert network.offline_flag() == "TRANSFORMERS_OFFLINE is set"
    assert network.offline_reason("http://127.0.0.1:9") == "TRANSFORMERS_OFFLINE is set"
    assert network._probes == {}  # no probe was needed


def test_no_probe_behind_a_proxy(clock, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert network.unreachable("http://127.0.0.1:9") is None
