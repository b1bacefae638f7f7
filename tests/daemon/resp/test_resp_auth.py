"""AUTH, SELECT and error wording, each compared with a real redis-server given
the same bytes (requirepass for AUTH, one database for SELECT)."""

from __future__ import annotations

import pytest
from pt2harness import RedisServer
from resp_helpers import REDIS_PY_VERSIONS, RespConnection, RespError, encode, run_redispy

PASSWORD = "s3cret"


@pytest.fixture
def auth_daemon(make_daemon):
    return make_daemon("--set", f"resp.password={PASSWORD}")


@pytest.fixture
def auth_redis(tmp_root):
    (tmp_root / "redis").mkdir()
    r = RedisServer(tmp_root / "redis", "--requirepass", PASSWORD, "--databases", "1").start()
    yield r
    r.stop()


def auth_transcript(sock) -> list:
    c = RespConnection(sock)
    replies = [
        c.command("GET", "k"),
        c.command("SET", "k", "v"),
        c.command("PING"),
        c.command("HELLO", "3"),
        c.command("AUTH", "wrong"),
        c.command("AUTH", "default", "wrong"),
        c.command("AUTH", "nobody", PASSWORD),
        c.command("GET", "k"),
        c.command("AUTH", PASSWORD),
        c.command("SET", "k", "v"),
        c.command("GET", "k"),
        c.command("SELECT", "0"),
        c.command("SELECT", "1"),
        c.command("SELECT", "x"),
        c.command("FOO", "x"),
        c.command("FOO"),
        c.command("GET"),
        c.command("SET", "k", "v", "EX", "0"),
        c.command("SET", "k", "v", "EX", "x"),
        c.command("SET", "k", "v", "BOGUS"),
        c.command("EXEC"),
        c.command("DISCARD"),
    ]
    c.close()
    return replies


def test_auth_and_errors_match_redis_server(auth_daemon, auth_redis):
    ours = auth_transcript(auth_daemon.socket)
    theirs = auth_transcript(auth_redis.socket)
    assert ours[0] == RespError("NOAUTH Authentication required.")
    assert ours[4] == RespError("WRONGPASS invalid username-password pair or user is disabled.")
    assert ours[8] == "OK" and ours[10] == b"v"
    assert ours[12] == RespError("ERR DB index is out of range")
    assert ours[14] == RespError("ERR unknown command 'FOO', with args beginning with: 'x' ")
    # HELLO's NOAUTH text differs between Redis releases (7.2 added "<proto>").
    hello = 3
    assert str(ours[hello]).startswith("NOAUTH HELLO must be called with the client already")
    assert str(theirs[hello]).startswith("NOAUTH HELLO must be called with the client already")
    assert ours[:hello] + ours[hello + 1:] == theirs[:hello] + theirs[hello + 1:]


def test_hello_auth(auth_daemon):
    c = RespConnection(auth_daemon.socket)
    refused = c.command("HELLO", "3")
    assert isinstance(refused, RespError) and str(refused).startswith("NOAUTH HELLO must be")
    assert c.command("HELLO", "3", "AUTH", "default", "wrong") == RespError(
        "WRONGPASS invalid username-password pair or user is disabled.")
    assert c.command("GET", "k") == RespError("NOAUTH Authentication required.")
    hello = c.command("HELLO", "3", "AUTH", "default", PASSWORD, "SETNAME", "inductor")
    assert hello[b"proto"] == 3
    assert c.command("CLIENT", "GETNAME") == b"inductor"
    assert c.command("GET", "k") is None
    # RESET forgets the authentication.
    assert c.command("RESET") == "RESET"
    assert c.command("GET", "k") == RespError("NOAUTH Authentication required.")
    c.close()


@pytest.mark.parametrize("version", REDIS_PY_VERSIONS)
def test_redis_py_with_password(auth_daemon, version):
    out = run_redispy(version, "auth", str(auth_daemon.socket), PASSWORD)
    # unix://:s3cret@/path (and ?password=, password=, default:s3cret@) work.
    assert out["url_set"] == {"ok": True}
    assert out["url_get"] == {"ok": "v"}
    assert out["url_missing"] == {"ok": None}
    assert out["url_resp"] == {"ok": "3" if version == "8" else "2"}
    for call in ("query_get", "kwargs_get", "user_get"):
        assert out[call] == {"ok": "v"}, (call, out[call])
    # Without (or with a wrong) password: an authentication error, which is a
    # redis-py ConnectionError (Inductor then disables the cache).
    for call in ("no_password_get", "wrong_password_get"):
        assert "error" in out[call], (call, out[call])
        assert out[call]["error"]["type"] == "AuthenticationError", (call, out[call])
        assert "ConnectionError" in out[call]["error"]["mro"], (call, out[call])


def test_no_password_configured(daemon, tmp_root):
    """As Redis's passwordless default user: AUTH pw is an error, AUTH default pw is OK,
    so redis-py URLs that carry credentials still work against a password-less daemon."""
    c = RespConnection(daemon.socket)
    err = c.command("AUTH", "pw")
    assert isinstance(err, RespError) and "without any password configured" in str(err)
    assert c.command("AUTH", "default", "anything") == "OK"
    assert c.command("HELLO", "3", "AUTH", "default", "x")[b"proto"] == 3
    c.close()
    (tmp_root / "redis").mkdir()
    r = RedisServer(tmp_root / "redis").start()
    try:
        c = RespConnection(r.socket)
        assert c.command("AUTH", "pw") == err
        assert c.command("AUTH", "default", "anything") == "OK"
        c.close()
    finally:
        r.stop()


def stranger_transcript(sock) -> list:
    """Commands too large for a client that has not authenticated, each on a
    connection of its own (the error closes it), then the same after AUTH."""
    replies = []
    big = b"x" * 16385
    for data in (encode(*["ECHO"] + ["a"] * 10),                 # 11 arguments
                 encode("ECHO", b"y" * 16384),                    # at the limit: NOAUTH
                 encode("SET", "k", big)):                        # one byte over
        c = RespConnection(sock)
        c.send(data)
        replies.append(c.reply())
        replies.append(c.closed_by_peer(timeout=2.0))
        c.close()
    c = RespConnection(sock)
    assert c.command("AUTH", PASSWORD) == "OK"
    replies.append(c.command("SET", "k", big))
    replies.append(c.command(*["EXISTS"] + ["k"] * 11))
    c.close()
    return replies


def test_unauthenticated_limits_match_redis_server(auth_daemon, auth_redis):
    """Where a password is required, a client that has not authenticated may
    send at most 10 arguments of at most 16 KiB each (Redis's rule since
    CVE-2021-32675): a stranger cannot make the daemon buffer a large request."""
    ours = stranger_transcript(auth_daemon.socket)
    assert ours[0] == RespError("ERR Protocol error: unauthenticated multibulk length")
    assert ours[1] is True
    assert ours[2] == RespError("NOAUTH Authentication required.")
    assert ours[3] is False
    assert ours[4] == RespError("ERR Protocol error: unauthenticated bulk length")
    assert ours[5] is True
    assert ours[6:] == ["OK", 11]
    assert ours == stranger_transcript(auth_redis.socket)
