"""Real Redis clients against the RESP front door: redis-py 4, 5 and 8 (the
clients Inductor uses), redis-cli (one-shot, piped, interactive on a pty, and
--pipe mass insertion) and hiredis (C)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time

import pytest
from resp_helpers import REDIS_PY_VERSIONS, RespConnection, run_redispy


@pytest.mark.parametrize("version", REDIS_PY_VERSIONS)
@pytest.mark.parametrize("mode", ["path", "url"])
def test_redis_py_commands(daemon, version, mode):
    out = run_redispy(version, "basic", str(daemon.socket), mode)
    assert out["redis_py"].startswith(version + ".")
    assert out["ping"] is True
    assert out["missing"] is None and out["missing_again"] is None
    assert out["set"] is True and out["get_equal"] is True
    assert out["set_ex"] is True and out["get_ex"] == "v" and out["set_px"] is True
    assert out["set_nx_existing"] is None and out["set_xx_missing"] is None
    assert out["exists"] == 2
    assert out["mget"] == ["v", None, "v"]
    assert out["delete"] == 1 and out["get_deleted"] is None
    assert out["dbsize"] == 2  # k and px (a fresh daemon)
    assert out["pipeline"] is True
    assert out["transaction"] == [True, "1", None]
    assert out["info_redis_version"] and out["info_has_keyspace"] is True
    # redis-py 8 opens with HELLO 3 and must really be speaking RESP3 (where a
    # missing key is "_"); 4 and 5 stay on RESP2.
    expected = "3" if version == "8" else "2"
    assert out["resp"] == expected
    if version != "4":
        assert out["conn_protocol"] == expected


@pytest.mark.parametrize("version", ["5", "8"])
def test_redis_py_protocol_2_url(daemon, version):
    out = run_redispy(version, "basic", str(daemon.socket), "url-proto2")
    assert out["resp"] == "2" and out["conn_protocol"] == "2"
    assert out["missing"] is None and out["get_equal"] is True and out["pipeline"] is True


def test_redis_py_8_protocol_3_url(daemon):
    out = run_redispy("8", "basic", str(daemon.socket), "url-proto3")
    assert out["resp"] == "3" and out["missing"] is None and out["transaction"] == [True, "1",
                                                                                   None]


def test_resp3_and_resp2_nulls_on_the_wire(daemon):
    """What redis-py 8 depends on: after HELLO 3 a missing key is '_', before it '$-1'."""
    c = RespConnection(daemon.socket)
    c.send(b"*2\r\n$3\r\nGET\r\n$4\r\nnone\r\n")
    assert c.raw_reply_line() == b"$-1"
    hello = c.command("HELLO", "3")
    assert hello[b"proto"] == 3 and hello[b"server"] == b"redis"
    c.send(b"*2\r\n$3\r\nGET\r\n$4\r\nnone\r\n")
    assert c.raw_reply_line() == b"_"
    c.send(b"*3\r\n$4\r\nMGET\r\n$4\r\nnone\r\n$4\r\nnada\r\n")
    assert [c.raw_reply_line() for _ in range(3)] == [b"*2", b"_", b"_"]
    hello2 = c.command("HELLO", "2")
    assert isinstance(hello2, list)  # RESP2 has no maps: a flat array
    assert dict(zip(hello2[::2], hello2[1::2]))[b"proto"] == 2
    c.send(b"*2\r\n$3\r\nGET\r\n$4\r\nnone\r\n")
    assert c.raw_reply_line() == b"$-1"
    c.close()


# ---- redis-cli ----

def redis_cli(sock, *args, input: bytes | None = None, timeout=60):
    return subprocess.run(["redis-cli", "-s", str(sock), *args], input=input,
                          capture_output=True, timeout=timeout)


def test_redis_cli_one_shot_commands(daemon):
    for args, expected in [(("ping",), b"PONG\n"), (("set", "cli:k", "v1"), b"OK\n"),
                           (("get", "cli:k"), b"v1\n"), (("get", "cli:none"), b"\n"),
                           (("dbsize",), b"1\n"), (("exists", "cli:k"), b"1\n")]:
        out = redis_cli(daemon.socket, *args)
        assert (out.returncode, out.stderr, out.stdout) == (0, b"", expected), args
    info = redis_cli(daemon.socket, "info")
    assert info.returncode == 0 and info.stderr == b""
    assert b"redis_version:" in info.stdout and b"db0:keys=1," in info.stdout


def test_redis_cli_session_on_stdin(daemon):
    script = b"ping\nset cli:a hello\nget cli:a\nget cli:none\ndbsize\ninfo keyspace\nquit\n"
    out = redis_cli(daemon.socket, input=script)
    assert out.returncode == 0
    assert out.stderr == b""
    lines = out.stdout.decode().splitlines()
    assert lines[:5] == ["PONG", "OK", "hello", "", "1"], lines
    assert "db0:keys=1,expires=0,avg_ttl=0" in out.stdout.decode()


class Pty:
    """redis-cli's interactive mode on a pseudo-terminal (TERM=dumb: plain line input)."""

    def __init__(self, *argv):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                     close_fds=True, env=dict(os.environ, TERM="dumb"))
        os.close(slave)

    def read_until(self, marker: bytes, timeout=10.0) -> bytes:
        out = b""
        deadline = time.monotonic() + timeout
        while marker not in out and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    out += os.read(self.master, 65536)
                except OSError:
                    break
        return out

    def type(self, line: str, prompt: bytes) -> str:
        os.write(self.master, line.encode() + b"\n")
        return self.read_until(prompt).decode(errors="replace")

    def close(self):
        os.write(self.master, b"exit\n")
        code = self.proc.wait(10)
        os.close(self.master)
        return code


def interactive_transcript(sock) -> list[str]:
    prompt = f"redis {sock}> ".encode()
    session = Pty("redis-cli", "-s", str(sock))
    assert prompt in session.read_until(prompt)
    replies = [session.type(cmd, prompt).replace(str(sock), "SOCK")
               for cmd in ("ping", "set cli:i v", "get cli:i", "get cli:none", "help get",
                           "dbsize", "hello 3", "get cli:none")]
    assert session.close() == 0
    return replies


def test_redis_cli_interactive_matches_redis_server(daemon, redis_server):
    ours = interactive_transcript(daemon.socket)
    theirs = interactive_transcript(redis_server.socket)
    for reply in ours:
        assert "(error)" not in reply, reply
    assert "summary: Get the value of a key" in "".join(ours).replace("\x1b[33m", "").replace(
        "\x1b[0m", "")
    # Everything but HELLO's server details reads as it does from redis-server.
    hello = 6
    assert ours[:hello] == theirs[:hello]
    assert ours[hello + 1:] == theirs[hello + 1:]
    assert '"proto" => (integer) 3' in ours[hello]


def test_redis_cli_pipe_mass_insertion(daemon):
    n = 10_000
    data = b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(k), k, len(v), v) for k, v in ((b"mass:%d" % i, b"value-%d" % i) for i in range(n)))
    out = redis_cli(daemon.socket, "--pipe", input=data, timeout=300)
    assert out.returncode == 0, out.stderr
    assert b"errors: 0, replies: 10000" in out.stdout, out.stdout
    assert redis_cli(daemon.socket, "dbsize").stdout == b"10000\n"
    for i in (0, 1, 4321, 9999):
        assert redis_cli(daemon.socket, "get", f"mass:{i}").stdout == f"value-{i}\n".encode()


# ---- hiredis ----

def test_hiredis_client(daemon, hiredis_client):
    out = subprocess.run([hiredis_client, str(daemon.socket)], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.startswith(b"ok: ")


def test_hiredis_client_fails_without_a_daemon(tmp_root, hiredis_client):
    """The C client really checks: it fails when there is nothing to talk to."""
    out = subprocess.run([hiredis_client, str(tmp_root / "nothing")], capture_output=True,
                         timeout=30)
    assert out.returncode == 1
