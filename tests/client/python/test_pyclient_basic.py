"""pt2cache.Client against the real pt2cached: every key-value operation."""

from __future__ import annotations

import os
import time

import pytest

import pt2cache
from pt2cache import ServerError
from pt2cache.client import default_socket_path


@pytest.mark.parametrize("size", [0, 1024, 1 << 20], ids=["0B", "1KiB", "1MiB"])
def test_round_trip(client, size):
    value = os.urandom(size)
    assert client.put("fx-graph", f"key-{size}", value) is True
    assert client.get("fx-graph", f"key-{size}") == value
    assert client.exists("fx-graph", f"key-{size}")


def test_value_types_and_binary_keys(client):
    assert client.put("pgo", b"\x00\xffbinary", bytearray(b"ba")) is True
    assert client.get("pgo", b"\x00\xffbinary") == b"ba"
    assert client.put("pgo", "unicode-é", memoryview(b"mv")) is True
    assert client.get("pgo", "unicode-é".encode()) == b"mv"
    # A key that is not UTF-8 lists as a surrogate-escaped str and round-trips.
    keys = {e.key for e in client.iter_list("pgo")}
    assert "unicode-é" in keys
    odd = next(k for k in keys if k.startswith("\x00"))
    assert client.get("pgo", odd) == b"ba"


def test_miss_and_overwrite(client):
    assert client.get("fx-graph", "absent") is None
    assert client.put("fx-graph", "k", b"one")
    assert client.put("fx-graph", "k", b"two")
    assert client.get("fx-graph", "k") == b"two"


def test_only_if_absent(client):
    assert client.put("aot-autograd", "k", b"first", only_if_absent=True) is True
    assert client.put("aot-autograd", "k", b"second", only_if_absent=True) is False
    assert client.get("aot-autograd", "k") == b"first"
    assert client.put("aot-autograd", "k", b"third") is True
    assert client.get("aot-autograd", "k") == b"third"


def test_ttl(client):
    assert client.put("pgo", "short", b"v", ttl=0.3)
    assert client.put("pgo", "forever", b"v", ttl=None)
    assert client.put("pgo", "zero", b"v", ttl=0)
    assert client.get("pgo", "short") == b"v"
    time.sleep(0.6)
    assert client.get("pgo", "short") is None
    assert not client.exists("pgo", "short")
    assert client.get("pgo", "forever") == b"v"
    assert client.get("pgo", "zero") == b"v"
    # An expired entry does not block only_if_absent.
    assert client.put("pgo", "short", b"again", only_if_absent=True)


def test_negative_ttl_is_refused_before_sending(client, lenient):
    with pytest.raises(ValueError):
        client.put("pgo", "k", b"v", ttl=-1)
    assert lenient.put("pgo", "k", b"v", ttl=-1) is False
    assert lenient.get("pgo", "k") is None


def test_exists_delete(client):
    assert not client.exists("fx-graph", "k")
    assert not client.delete("fx-graph", "k")
    client.put("fx-graph", "k", b"v")
    assert client.exists("fx-graph", "k")
    assert client.delete("fx-graph", "k") is True
    assert client.delete("fx-graph", "k") is False
    assert client.get("fx-graph", "k") is None


def test_list_pages_and_clear(client):
    keys = {f"k{i:03d}" for i in range(25)}
    for k in keys:
        client.put("autotune", k, k.encode() * 3)
    client.put("pgo", "other", b"x")
    seen = []
    cursor = b""
    pages = 0
    while True:
        page = client.list("autotune", cursor, limit=10)
        pages += 1
        seen.extend(page.entries)
        if page.complete:
            break
        cursor = page.next_cursor
    assert pages >= 3
    assert {e.key for e in seen} == keys
    assert all(e.size == 12 for e in seen)
    now_ms = time.time() * 1000
    assert all(now_ms - 60_000 < e.mtime_ms <= now_ms + 1000 for e in seen)
    assert {e.key for e in client.iter_list("autotune", page_size=7)} == keys
    assert client.clear("autotune") == 25
    assert list(client.iter_list("autotune")) == []
    assert client.get("autotune", "k000") is None
    assert client.get("pgo", "other") == b"x"
    assert client.clear("autotune") == 0


def test_stats(client, daemon):
    client.put("fx-graph", "k", b"abc")
    client.get("fx-graph", "k")
    client.get("fx-graph", "nope")
    stats = client.stats()
    assert isinstance(stats, dict)
    assert stats["pid"] == daemon.proc.pid
    assert stats["socket"] == str(daemon.socket)
    fx = stats["namespaces"]["fx-graph"]
    assert fx["memory"]["hits"] == 1
    assert fx["memory"]["puts"] == 1
    assert fx["memory"]["bytes_in"] == 3
    assert stats["daemon"]["connections_active"] >= 1


def test_ping_and_server_info(client):
    assert client.server_info is None
    rtt = client.ping()
    assert isinstance(rtt, float) and 0 <= rtt < 1
    assert client.ping(b"x" * 1000) is not None
    info = client.server_info
    assert info.version == 1
    assert info.max_value == 512 << 20
    assert info.max_key == 1024
    assert info.server_name.startswith("pt2cached")
    assert info.supports_ttl


def accepted(client) -> int:
    return client.stats()["daemon"]["connections_accepted"]


def test_get_many_pipelines(client, daemon):
    before = accepted(client)
    values = {f"k{i}": os.urandom(i * 100) for i in range(1, 200)}
    for k, v in values.items():
        client.put("fx-graph", k, v)
    keys = list(values) + ["absent-1", "absent-2"]
    got = client.get_many("fx-graph", keys)
    assert got == [values.get(k) for k in keys]
    assert client.get_many("fx-graph", []) == []
    # All on the one connection.
    assert accepted(client) == before


def test_one_connection_reused(client):
    before = accepted(client)
    for i in range(50):
        client.put("pgo", f"k{i}", b"v")
        client.get("pgo", f"k{i}")
    assert accepted(client) == before


@pytest.mark.parametrize("ns,key,status", [
    ("Bad_NS", "k", "BAD_NAMESPACE"),
    ("", "k", "BAD_NAMESPACE"),
    ("x" * 33, "k", "BAD_NAMESPACE"),
    ("fx-graph", "", "KEY_TOO_LONG"),
    ("fx-graph", "k" * 1025, "KEY_TOO_LONG"),
])
def test_bad_arguments_checked_before_sending(client, lenient, ns, key, status):
    before = accepted(client)
    with pytest.raises(ServerError) as info:
        client.get(ns, key)
    assert info.value.status_name == status
    # Nothing was sent: the connection is still the first one.
    assert client.connected
    assert lenient.get(ns, key) is None
    assert lenient.put(ns, key, b"v") is False
    assert client.stats()["daemon"]["protocol_errors"] == 0
    # The lenient client never even connected: arguments are checked first.
    assert accepted(client) == before
    assert not lenient.connected


def test_key_of_1024_bytes_is_fine(client):
    key = "k" * 1024
    assert client.put("fx-graph", key, b"v")
    assert client.get("fx-graph", key) == b"v"


def test_value_over_max_value(make_daemon):
    d = make_daemon("--set", "daemon.max_value_size=1KiB", sub="small")
    strict = pt2cache.Client(d.socket, strict=True)
    with pytest.raises(ServerError) as info:
        strict.put("fx-graph", "k", b"x" * 1025)
    assert info.value.status_name == "VALUE_TOO_LARGE"
    assert strict.put("fx-graph", "k", b"x" * 1024)
    lenient = pt2cache.Client(d.socket)
    assert lenient.put("fx-graph", "k2", b"x" * 1025) is False
    assert lenient.get("fx-graph", "k") == b"x" * 1024


def test_context_manager_and_close(daemon):
    with pt2cache.Client(daemon.socket, strict=True) as c:
        c.put("pgo", "k", b"v")
        assert c.connected
    assert not c.connected
    assert c.get("pgo", "k") == b"v"  # reopens
    c.close()


def test_default_socket_path_rules(monkeypatch):
    env = {"PT2CACHE_SOCKET": "/x/explicit.sock", "XDG_RUNTIME_DIR": "/run/user/7"}
    assert default_socket_path(env) == "/x/explicit.sock"
    env["PT2CACHE_SOCKET"] = ""
    assert default_socket_path(env) == "/run/user/7/pt2cache/pt2cached.sock"
    env["XDG_RUNTIME_DIR"] = "/run/user/7//"
    assert default_socket_path(env) == "/run/user/7/pt2cache/pt2cached.sock"
    env["XDG_RUNTIME_DIR"] = "/"
    assert default_socket_path(env) == "/pt2cache/pt2cached.sock"
    env["XDG_RUNTIME_DIR"] = ""
    assert default_socket_path(env) == f"/tmp/pt2cache-{os.getuid()}/pt2cached.sock"
    assert default_socket_path({}) == f"/tmp/pt2cache-{os.getuid()}/pt2cached.sock"
    monkeypatch.setenv("PT2CACHE_SOCKET", "/y/from-env.sock")
    assert default_socket_path() == "/y/from-env.sock"
    assert pt2cache.Client().socket_path == "/y/from-env.sock"


def test_pt2cache_socket_env_reaches_the_daemon(daemon, monkeypatch):
    monkeypatch.setenv("PT2CACHE_SOCKET", str(daemon.socket))
    c = pt2cache.Client(strict=True)
    assert c.put("pgo", "via-env", b"1")
    assert daemon.cli("get", "pgo", "via-env").stdout == b"1"


def test_cli_sees_client_writes_and_back(client, daemon):
    client.put("fx-graph", "from-python", b"hello")
    assert daemon.cli("get", "fx-graph", "from-python").stdout == b"hello"
    daemon.cli("put", "fx-graph", "from-cli", "-", input=b"world", check=True)
    assert client.get("fx-graph", "from-cli") == b"world"
