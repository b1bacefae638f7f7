"""metrics.listen: the daemon's GET /metrics over HTTP/1.1 on loopback, under good and
bad requests (oversized, slowloris, non-GET, many connections), while the cache keeps
serving."""

from __future__ import annotations

import socket
import time

import pytest
from integ_helpers import NativeClient, drain_disk_queue
from prometheus_client.parser import text_string_to_metric_families
from pt2harness import STATUS

NS = "fx-graph"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(make_daemon):
    port = free_port()
    d = make_daemon("--set", f"metrics.listen=127.0.0.1:{port}")
    d.port = port
    return d


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def read_all(s: socket.socket, limit: float = 15.0) -> bytes:
    """Everything until the peer closes (bounded by `limit` seconds)."""
    data = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def http(port: int, request: bytes) -> tuple[int, dict, bytes]:
    with connect(port) as s:
        s.sendall(request)
        raw = read_all(s)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    assert int(headers["content-length"]) == len(body)
    return status, headers, body


def cache_works(daemon) -> None:
    c = NativeClient(daemon.socket, timeout=5.0)
    try:
        assert c.put(NS, b"k", b"v") == STATUS["ok"]
        assert c.get(NS, b"k") == (STATUS["ok"], b"v")
    finally:
        c.close()


def test_get_metrics(served):
    cache_works(served)
    drain_disk_queue(served)  # the disk tier's size must not move between the two reads
    status, headers, body = http(served.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert headers["connection"] == "close"
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    hits = [s for s in families["pt2cache_tier_hits"].samples
            if s.labels == {"ns": NS, "tier": "memory"}]
    assert [s.value for s in hits] == [1]
    # The same text as `pt2cache metrics`, but for the counters that the two requests
    # themselves move (frames, connections, uptime).
    moving = ("pt2cache_frames_total", "pt2cache_connections_", "pt2cache_uptime",
              "pt2cache_since_reset", "pt2cache_inflight_bytes")
    cli = served.cli("metrics").stdout.decode()

    def stable(text):
        return [l for l in text.splitlines() if not l.startswith(moving)]

    assert stable(body.decode()) == stable(cli)
    # A query string is ignored.
    assert http(served.port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")[0] == 200


@pytest.mark.parametrize("request_bytes,expected", [
    (b"GET / HTTP/1.1\r\n\r\n", 404),
    (b"GET /metricsx HTTP/1.1\r\n\r\n", 404),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 405),
    (b"HEAD /metrics HTTP/1.1\r\n\r\n", 405),
    (b"DELETE /metrics HTTP/1.1\r\n\r\n", 405),
    (b"GET /metrics\r\n\r\n", 400),
    (b"\x00\x01\x02 garbage\r\n\r\n", 400),
    (b"GET /metrics SPDY/3\r\n\r\n", 400),
])
def test_bad_requests(served, request_bytes, expected):
    status, headers, _ = http(served.port, request_bytes)
    assert status == expected
    if expected == 405:
        assert headers["allow"] == "GET"
    cache_works(served)


def test_oversized_header_gets_431(served):
    request = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"
    with connect(served.port) as s:
        try:
            s.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon may close before taking it all
        raw = read_all(s)
    assert raw.startswith(b"HTTP/1.1 431 "), raw[:100]
    cache_works(served)
    assert http(served.port, b"GET /metrics HTTP/1.1\r\n\r\n")[0] == 200


def test_slowloris_is_closed(served):
    with connect(served.port, timeout=15.0) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        started = time.monotonic()
        # Dribble header bytes; the daemon keeps serving the cache meanwhile.
        closed = False
        for i in range(20):
            cache_works(served)
            try:
                s.sendall(b"X-A: b\r\n")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            s.settimeout(0.5)
            try:
                if s.recv(100) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed = True
                break
        elapsed = time.monotonic() - started
    assert closed, "a header dribbled for 10 s was not cut off"
    assert 4.0 <= elapsed <= 8.0, elapsed


def test_many_connections(served):
    idle = [connect(served.port) for _ in range(16)]
    try:
        time.sleep(0.3)  # let the daemon accept them all
        extra = [connect(served.port) for _ in range(8)]
        # Connections over the limit are closed without an answer.
        for s in extra:
            s.settimeout(3.0)
            assert read_all(s, limit=3.0) == b""
            s.close()
        cache_works(served)
    finally:
        for s in idle:
            s.close()
    # With the idle ones gone the endpoint answers again.
    deadline = time.monotonic() + 5
    while True:
        try:
            status, _, _ = http(served.port, b"GET /metrics HTTP/1.1\r\n\r\n")
            break
        except (IndexError, ValueError, KeyError, ConnectionError):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert status == 200


def test_off_by_default(daemon):
    assert "GET /metrics" not in daemon.log()


@pytest.mark.parametrize("address,message", [
    ("0.0.0.0:9464", "every interface"),
    ("[::]:9464", "every interface"),
    ("example.com:9464", "not an IPv4 address"),
    ("127.0.0.1:0", "port"),
])
def test_refused_addresses(make_daemon, address, message):
    d = make_daemon("--set", f"metrics.listen={address}", start=False)
    d.start(wait=False)
    assert d.proc.wait(10) == 2
    assert "metrics.listen" in d.log() and message in d.log(), d.log()


def test_port_in_use(make_daemon):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        d = make_daemon("--set", f"metrics.listen=127.0.0.1:{port}", start=False)
        d.start(wait=False)
        assert d.proc.wait(10) == 1
    assert "cannot listen on 127.0.0.1" in d.log(), d.log()
    assert not d.socket.exists()
