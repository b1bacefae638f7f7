"""The remote tier over TLS (rediss://) against a real redis-server with
--tls-port on loopback (no plain TCP port), with certificates made by the test
with the openssl CLI (tests/support/tls_certs.py): a good certificate, a wrong
CA, an expired certificate, a wrong server name, tls_verify = false, mutual
TLS, and a server that accepts TCP and never speaks TLS."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pt2harness import RedisServer, wait_for
from remote_helpers import (MISS, OK, Native, free_port, fx_key, inductor_value, redis_args,
                            redis_client, remote_stats, wait_remote_state)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from tls_certs import TlsCerts, redis_tls_args  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """One CA with a server certificate for 127.0.0.1, one for the name
    redis.test only, an expired one, a client certificate; and another CA."""
    root = tmp_path_factory.mktemp("tls")
    ca = TlsCerts(root / "ca")
    return {
        "ca": ca,
        "server": ca.issue("server", dns=["localhost"], ips=["127.0.0.1"]),
        "named": ca.issue("named", dns=["redis.test"]),
        "expired": ca.issue("expired", dns=["localhost"], ips=["127.0.0.1"], expired=True),
        "client": ca.issue("client", client=True),
        "other": TlsCerts(root / "other", name="another CA"),
    }


@pytest.fixture
def tls_redis(tmp_root, certs):
    """start(server_cert_name, auth_clients=False) -> (RedisServer, TLS port)."""
    started = []

    def start(cert="server", auth_clients=False):
        root = tmp_root / f"redis-tls-{len(started)}"
        root.mkdir(mode=0o700)
        port = free_port()
        r = RedisServer(root, *redis_tls_args(port, certs[cert], certs["ca"].ca, auth_clients),
                        port=0).start()
        started.append(r)
        return r, port

    yield start
    for r in started:
        r.stop()


def tls_daemon(make_daemon, port, sub="", host="127.0.0.1", **settings):
    env = {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
           "TORCHINDUCTOR_REDIS_URL": f"rediss://{host}:{port}"}
    return make_daemon(*redis_args(**settings), env=env, sub=sub)


def redis_cli_tls(port, certs, *args, client=None) -> bytes:
    cmd = ["redis-cli", "--tls", "--cacert", str(certs["ca"].ca), "-h", "127.0.0.1", "-p",
           str(port)]
    if client:
        cmd += ["--cert", str(client.cert), "--key", str(client.key)]
    return subprocess.run(cmd + list(args), capture_output=True, check=True,
                          timeout=30).stdout


def assert_serves_over_tls(d, r, port, certs, seed, client=None):
    """A put reaches Redis over TLS (read back with redis-cli --tls) and a
    value written into Redis is a hit through the daemon."""
    wait_remote_state(d, "connected")
    native = Native(d.socket)
    redis_key, inner = fx_key(f"{seed}-put")
    value = inductor_value(30_000)
    assert native.put("fx-graph", inner, value) == OK
    wait_for(lambda: redis_client(r).get(redis_key) is not None, what="the SET over TLS")
    assert redis_cli_tls(port, certs, "GET", redis_key, client=client) == value + b"\n"

    other_key, other_inner = fx_key(f"{seed}-get")
    redis_client(r).set(other_key, value)
    assert native.get("fx-graph", other_inner) == (OK, value)
    stats = d.stats()
    assert stats["remote"]["hits"] == 1 and stats["remote"]["written"] >= 1
    assert stats["tiers"]["remote"]["tls"] is True
    assert stats["tiers"]["remote"]["endpoint"] == f"rediss://127.0.0.1:{port}"
    native.close()


def assert_refused(d, reason: str):
    """The TLS connection fails: counted, logged with `reason`, the daemon
    answers locally and keeps running."""
    wait_for(lambda: remote_stats(d)["errors"] >= 1, what="a counted TLS failure")
    _, inner = fx_key("refused")
    assert Native(d.socket).get("fx-graph", inner) == (MISS, b"")
    stats = remote_stats(d)
    assert stats["hits"] == 0 and stats["state"] != "connected"
    wait_for(lambda: reason in d.log(), what=f"{reason!r} in the log")
    assert d.proc.poll() is None


def test_good_certificate(make_daemon, tls_redis, certs):
    r, port = tls_redis()
    d = tls_daemon(make_daemon, port, tls_ca_file=certs["ca"].ca)
    assert_serves_over_tls(d, r, port, certs, "good")
    assert "tls_verify = false" not in d.log()


def test_server_name_is_verified(make_daemon, tls_redis, certs):
    r, port = tls_redis("named")  # a certificate for redis.test only
    good = tls_daemon(make_daemon, port, sub="good", tls_ca_file=certs["ca"].ca,
                      tls_server_name="redis.test")
    assert_serves_over_tls(good, r, port, certs, "named")
    wrong = tls_daemon(make_daemon, port, sub="wrong", tls_ca_file=certs["ca"].ca,
                       tls_server_name="other.test")
    assert_refused(wrong, "certificate verification failed: hostname mismatch")
    # Without a server name the host (127.0.0.1) is verified: not in the certificate.
    by_ip = tls_daemon(make_daemon, port, sub="ip", tls_ca_file=certs["ca"].ca)
    assert_refused(by_ip, "certificate verification failed: IP address mismatch")


def test_wrong_ca_is_refused(make_daemon, tls_redis, certs):
    _, port = tls_redis()
    d = tls_daemon(make_daemon, port, tls_ca_file=certs["other"].ca)
    assert_refused(d, "certificate verification failed")


def test_expired_certificate_is_refused(make_daemon, tls_redis, certs):
    _, port = tls_redis("expired")
    d = tls_daemon(make_daemon, port, tls_ca_file=certs["ca"].ca)
    assert_refused(d, "certificate verification failed: certificate has expired")


def test_tls_verify_false_accepts_any_certificate_and_warns(make_daemon, tls_redis, certs):
    r, port = tls_redis()
    d = tls_daemon(make_daemon, port, tls_ca_file=certs["other"].ca, tls_verify="false")
    assert_serves_over_tls(d, r, port, certs, "noverify")
    assert "remote.tls_verify = false: the Redis server's certificate is NOT verified" in d.log()


def test_mutual_tls(make_daemon, tls_redis, certs):
    r, port = tls_redis(auth_clients=True)
    client = certs["client"]
    d = tls_daemon(make_daemon, port, sub="with", tls_ca_file=certs["ca"].ca,
                   tls_cert_file=client.cert, tls_key_file=client.key)
    assert_serves_over_tls(d, r, port, certs, "mtls", client=client)
    # Without a client certificate Redis ends the connection (with TLS 1.3,
    # after the client's side of the handshake: the first read or write fails,
    # "alert certificate required" or a reset).
    without = tls_daemon(make_daemon, port, sub="without", tls_ca_file=certs["ca"].ca)
    assert_refused(without, f"rediss://127.0.0.1:{port}: TLS ")


def test_unreadable_tls_files_stop_the_daemon(make_daemon, tls_redis, certs, tmp_root):
    _, port = tls_redis()
    with pytest.raises(RuntimeError, match="cannot load the CA file"):
        tls_daemon(make_daemon, port, tls_ca_file=tmp_root / "missing.pem")
    with pytest.raises(RuntimeError, match="cannot load the client key"):
        tls_daemon(make_daemon, port, sub="key", tls_ca_file=certs["ca"].ca,
                   tls_cert_file=certs["client"].cert, tls_key_file=certs["server"].key)


def test_handshake_with_a_silent_server_holds_the_deadline(make_daemon):
    """A server that accepts TCP and never speaks TLS: the handshake is cut off
    at the deadline (counted as a timeout) and the daemon answers locally."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # never accepted: the kernel completes the TCP handshake
        port = listener.getsockname()[1]
        d = tls_daemon(make_daemon, port, op_ms=300, connect_ms=200)
        # Logged when the breaker opens (after 3 failures).
        wait_for(lambda: "TLS handshake: no answer within" in d.log(), timeout=20,
                 what="handshakes timing out")
        assert remote_stats(d)["timeouts"] >= 3
        _, inner = fx_key("silent")
        started = time.monotonic()
        assert Native(d.socket).get("fx-graph", inner) == (MISS, b"")
        # Answered locally (the tier is not connected), within the get budget anyway.
        assert time.monotonic() - started < 0.5 + 0.5
        assert remote_stats(d)["errors"] == 0


def test_large_values_over_tls(make_daemon, tls_redis, certs):
    """Multi-record transfers both ways (partial TLS writes and reads, a bulk
    read straight into its buffer)."""
    r, port = tls_redis()
    d = tls_daemon(make_daemon, port, op_ms=5000, tls_ca_file=certs["ca"].ca)
    wait_remote_state(d, "connected")
    native = Native(d.socket)
    value = os.urandom(24 << 20)
    redis_key, inner = fx_key("large-put")
    assert native.put("fx-graph", inner, value) == OK
    wait_for(lambda: redis_client(r).strlen(redis_key) == len(value), timeout=30,
             what="the large SET over TLS")
    assert redis_client(r).get(redis_key) == value
    other_key, other_inner = fx_key("large-get")
    redis_client(r).set(other_key, value[::-1])
    assert native.get("fx-graph", other_inner) == (OK, value[::-1])
    assert remote_stats(d)["errors"] == 0


def test_tls_needs_tcp(make_daemon, redis_server):
    env = {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
           "TORCHINDUCTOR_REDIS_URL": f"unix://{redis_server.socket}"}
    with pytest.raises(RuntimeError, match="TLS needs a TCP endpoint"):
        make_daemon(*redis_args(tls="true"), env=env)
