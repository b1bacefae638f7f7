"""Inductor's exact use of the remote cache through redis-py 4, 5 and 8: its key
and value formats, SET with EX, reads through the native CLI and back, TTLs,
and what a client sees when the daemon is gone (ConnectionError, never
ResponseError)."""

from __future__ import annotations

import json
import subprocess

import pytest
from resp_helpers import (CLIENT_SCRIPT, REDIS_PY_VERSIONS, inductor_key, inductor_value,
                          run_redispy, venv_python)

SIZES = [1, 100_000, 3_000_000]  # bytes of pickle before base64


@pytest.mark.parametrize("version", REDIS_PY_VERSIONS)
def test_fx_graph_entry_round_trip(daemon, tmp_root, version):
    for size in SIZES:
        key, inner = inductor_key("fx-graph-v1", "f", f"{version}:{size}".encode())
        assert len(key) == 72 and len(inner) == 52
        value = inductor_value(size)
        value_file = tmp_root / f"value-{size}"
        value_file.write_bytes(value)
        out = run_redispy(version, "put", str(daemon.socket), key, str(value_file), "3600")
        assert out == {"set": True, "read_back_equal": True}
        # The same entry through the native protocol: namespace fx-graph, the
        # inner key, byte for byte on the CLI's stdout.
        cli = daemon.cli("get", "fx-graph", inner)
        assert cli.returncode == 0, cli.stderr
        assert cli.stdout == value
        # And a second redis-py client (a later compile) reads it back.
        got = tmp_root / f"got-{size}"
        assert run_redispy(version, "get", str(daemon.socket), key, str(got)) == {"found": True}
        assert got.read_bytes() == value


@pytest.mark.parametrize("version", REDIS_PY_VERSIONS)
def test_native_put_is_visible_to_redis_py(daemon, tmp_root, version):
    value = inductor_value(50_000)
    src = tmp_root / "entry"
    src.write_bytes(value)
    inner = f"a123{version}"
    put = daemon.cli("put", "aot-autograd", inner, str(src))
    assert put.returncode == 0, put.stderr
    got = tmp_root / "got"
    out = run_redispy(version, "get", str(daemon.socket),
                      f"pt2:autograd-experimental::{inner}:c1", str(got))
    assert out == {"found": True}
    assert got.read_bytes() == value
    # A key of another namespace is a different entry.
    out = run_redispy(version, "get", str(daemon.socket), f"pt2:fx-graph-v1::{inner}:c1",
                      str(tmp_root / "none"))
    assert out == {"found": False}


def test_other_inductor_key_forms_map_to_their_namespaces(daemon, tmp_root):
    autotune_id = "ab" * 32
    kernel = "cd" * 32
    cases = [
        (f"pt2:{autotune_id}::{kernel}:c1", "autotune", f"{autotune_id}::{kernel}"),
        ("pt2:bundled-autotune-v1::" + "ef" * 32 + ":c1", "autotune-bundle", "ef" * 32),
        ("pt2:dynamo-pgo::job:0:tag:c1", "pgo", "job:0:tag"),
        ("plain-redis-key", "redis", "plain-redis-key"),
    ]
    for redis_key, ns, key in cases:
        src = tmp_root / "v"
        src.write_bytes(b'{"num_warps": 4}')
        out = run_redispy("8", "put", str(daemon.socket), redis_key, str(src), "0")
        assert out["set"] is True
        cli = daemon.cli("get", ns, key)
        assert (cli.returncode, cli.stdout) == (0, b'{"num_warps": 4}'), (redis_key, cli.stderr)


@pytest.mark.parametrize("version", REDIS_PY_VERSIONS)
def test_ttl_is_honoured(daemon, version):
    key, _ = inductor_key("fx-graph-v1", "f", f"ttl-{version}".encode())
    out = run_redispy(version, "ttl", str(daemon.socket), key)
    assert out["set"] is True
    assert out["right_after"] == "short-lived"
    assert out["after_500ms"] is None


@pytest.mark.parametrize("version", REDIS_PY_VERSIONS)
def test_daemon_not_running_raises_connection_error(tmp_root, version):
    out = run_redispy(version, "down", str(tmp_root / "no-daemon.sock"))
    for call, result in out.items():
        assert "error" in result, (call, result)
        assert "ConnectionError" in result["error"]["mro"], (call, result)
        assert "ResponseError" not in result["error"]["mro"], (call, result)


@pytest.mark.parametrize("version", REDIS_PY_VERSIONS)
def test_daemon_stopped_under_a_connected_client(make_daemon, version):
    d = make_daemon()
    proc = subprocess.Popen([venv_python(version), str(CLIENT_SCRIPT), "stale", str(d.socket)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        assert d.stop() == 0
        out_bytes, err = proc.communicate(b"go\n", timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode()
    out = json.loads(out_bytes)
    assert out["first"] is True
    for call in ("get", "set"):
        assert "ConnectionError" in out[call]["error"]["mro"], out
        assert "ResponseError" not in out[call]["error"]["mro"], out
