"""GET and SET are never answered with -ERR (Inductor's ResponseError would fail
a compile): what cannot be served closes the connection, which redis-py turns
into ConnectionError and Inductor into "cache unavailable"."""

from __future__ import annotations

import pytest
import redis
from resp_helpers import REDIS_PY_VERSIONS, RespConnection, encode, run_redispy

MAX_VALUE = 1 << 20


@pytest.fixture
def limited(make_daemon):
    return make_daemon("--set", "daemon.max_value_size=1MiB")


@pytest.mark.parametrize("version", REDIS_PY_VERSIONS)
def test_set_with_a_key_over_1024_bytes_closes(limited, version):
    out = run_redispy(version, "oversize", str(limited.socket), "key", "1100")
    error = out["set"]["error"]
    assert "ConnectionError" in error["mro"] and "ResponseError" not in error["mro"], error
    assert out["after"] == {"ok": "ok"}


@pytest.mark.parametrize("version", REDIS_PY_VERSIONS)
def test_set_with_a_value_over_max_value_size_closes(limited, version):
    out = run_redispy(version, "oversize", str(limited.socket), "value", str(MAX_VALUE + 1))
    error = out["set"]["error"]
    assert "ConnectionError" in error["mro"] and "ResponseError" not in error["mro"], error
    assert out["after"] == {"ok": "ok"}
    assert out["elapsed"] < 10


def test_value_at_the_limit_is_stored(limited):
    r = redis.Redis(unix_socket_path=str(limited.socket))
    value = b"y" * MAX_VALUE
    assert r.set("pt2:fx-graph-v1::fatlimit:c1", value, ex=3600) is True
    assert r.get("pt2:fx-graph-v1::fatlimit:c1") == value


def test_oversized_set_is_closed_without_any_reply(limited):
    for data in (encode("SET", "k" * 1025, "v"),
                 encode("SET", "k", b"z" * (MAX_VALUE + 1)),
                 # Closed as soon as the length is known, before the bytes.
                 b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % (MAX_VALUE + 1)):
        c = RespConnection(limited.socket)
        try:
            c.send(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while the value was still being sent
        assert c.closed_by_peer()
        assert c.buf == b"", c.buf
        c.close()
    assert "closing the connection instead of an error reply" in limited.log()


def test_oversized_set_in_a_transaction_closes_before_exec_replies(limited):
    c = RespConnection(limited.socket)
    assert c.command("MULTI") == "OK"
    assert c.command("GET", "k") == "QUEUED"
    c.send(encode("SET", "k" * 1025, "v") + encode("EXEC"))
    assert c.closed_by_peer()
    # Neither QUEUED nor the start of EXEC's array: no reply cut short.
    assert c.buf == b"", c.buf
    c.close()
    r = redis.Redis(unix_socket_path=str(limited.socket))
    with pytest.raises(redis.ConnectionError):
        r.pipeline(transaction=True).get("k").set("k" * 1025, "v").execute()
    assert r.set("k", "v") and r.get("k") == b"v"
    r.close()


def test_get_with_a_key_over_1024_bytes_is_a_miss(limited):
    r = redis.Redis(unix_socket_path=str(limited.socket))
    assert r.get("k" * 5000) is None
    assert r.mget(["k" * 5000, "x"]) == [None, None]
    assert r.exists("k" * 5000) == 0
