"""The Python client as a package (issue 12, part 5): the wheel builds offline
and installs into a fresh virtual environment, which then talks to a real
daemon; `python -m pt2cache stats` mirrors `pt2cache stats`; the type hints pass
`mypy --strict`.

Wheel building and mypy use the `pytools` venv of tools/python-env (setuptools,
wheel, mypy): at test time nothing is downloaded."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyclient_helpers import PACKAGE_SRC
from pt2harness import PT2CACHE_CLI

PACKAGE_DIR = PACKAGE_SRC.parent
VENVS = Path(os.environ.get("PT2CACHE_VENVS") or PACKAGE_DIR.parents[1] / ".venv")
PYTOOLS = VENVS / "pytools" / "bin" / "python"


def pytools() -> Path:
    if not PYTOOLS.exists():
        pytest.fail(f"{PYTOOLS} is missing: run tools/python-env")
    return PYTOOLS


def clean_env() -> dict:
    """The environment without the source tree on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(*args, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    out = subprocess.run([str(a) for a in args], cwd=cwd, env=env or clean_env(),
                         capture_output=True, timeout=timeout)
    assert out.returncode == 0, f"{args}: {out.stdout.decode()}\n{out.stderr.decode()}"
    return out


def test_mypy_strict_passes(tmp_root):
    out = run(pytools(), "-m", "mypy", "--cache-dir", tmp_root / "mypy-cache",
              cwd=PACKAGE_DIR)
    assert b"Success: no issues found" in out.stdout


def test_the_wheel_installs_into_a_fresh_venv_and_talks_to_the_daemon(daemon, tmp_root):
    # Build from a copy: the build leaves build/ and *.egg-info behind.
    source = tmp_root / "src-copy"
    shutil.copytree(PACKAGE_DIR, source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    wheels = tmp_root / "wheels"
    run(pytools(), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
        "--disable-pip-version-check", "-q", "-w", wheels, source)
    (wheel,) = wheels.glob("pt2cache-*-py3-none-any.whl")

    venv = tmp_root / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
        "-q", wheel)

    # Imported from the venv's site-packages (cwd and PYTHONPATH hold no source).
    script = (
        "import json, sys, pathlib, pt2cache\n"
        "path = pathlib.Path(pt2cache.__file__)\n"
        "assert 'site-packages' in path.parts, path\n"
        "assert (path.parent / 'py.typed').exists()\n"
        "c = pt2cache.Client(sys.argv[1], strict=True)\n"
        "assert c.put('fx-graph', 'wheel-key', b'from the wheel')\n"
        "print(json.dumps({'got': c.get('fx-graph', 'wheel-key').decode(),\n"
        "                  'version': pt2cache.__version__}))\n")
    out = run(python, "-c", script, daemon.socket, cwd=tmp_root)
    assert json.loads(out.stdout) == {"got": "from the wheel", "version": "0.1.0"}

    out = run(python, "-m", "pt2cache", "--socket", daemon.socket, "stats", "--json",
              cwd=tmp_root)
    stats = json.loads(out.stdout)
    assert stats["namespaces"]["fx-graph"]["memory"]["puts"] == 1
    out = run(python, "-m", "pt2cache", "--socket", daemon.socket, "ping", cwd=tmp_root)
    assert re.fullmatch(rb"\d+ \xc2\xb5s\n", out.stdout)


def masked(text: str) -> str:
    """Numbers (which move between two calls: uptime, request counts) masked."""
    return re.sub(r"\d+(\.\d+)?", "N", text)


def python_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)  # conftest put the source tree on PYTHONPATH
    return subprocess.run([sys.executable, "-m", "pt2cache", *args], capture_output=True,
                          env=env, timeout=60)


def cxx_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PT2CACHE_CLI, *args], capture_output=True, timeout=60)


def compare_stats(socket_path):
    py = python_cli("--socket", str(socket_path), "stats")
    cxx = cxx_cli("--socket", str(socket_path), "stats")
    assert py.returncode == cxx.returncode == 0, (py.stderr, cxx.stderr)
    assert masked(py.stdout.decode()) == masked(cxx.stdout.decode())
    py_json = json.loads(python_cli("--socket", str(socket_path), "stats", "--json").stdout)
    cxx_json = json.loads(cxx_cli("--socket", str(socket_path), "stats", "--json").stdout)
    assert list(py_json) == list(cxx_json)
    assert py_json["namespaces"] == cxx_json["namespaces"]
    return py.stdout.decode()


def test_python_stats_mirrors_the_cli(client, daemon):
    text = compare_stats(daemon.socket)
    assert "no cache activity yet" in text
    for i in range(3):
        client.put("fx-graph", f"k{i}", b"x" * (3000 * i + 1))
        client.get("fx-graph", f"k{i}")
    client.get("autotune", "absent")
    text = compare_stats(daemon.socket)
    assert re.search(r"^fx-graph +memory +3 +0 +3 ", text, re.M), text
    assert re.search(r"^fx-graph +get +memory +3 ", text, re.M), text  # the latency table


def test_python_stats_mirrors_the_cli_with_a_remote_tier(make_daemon, redis_server):
    d = make_daemon(env={"TORCHINDUCTOR_REDIS_URL": f"unix://{redis_server.socket}",
                         "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"})
    from pt2cache import Client
    c = Client(d.socket, strict=True)
    c.put("fx-graph", "remote-key", b"value")
    c.get("fx-graph", "other")
    c.close()
    text = compare_stats(d.socket)
    assert re.search(r"^remote \S+", text, re.M), text
    assert re.search(r"^ {10}write queue \d+ entries, .* oldest [0-9.]+ s$", text, re.M), text
    assert "write-behind queue" in text


def test_python_cli_exit_statuses(tmp_root):
    out = python_cli("--socket", str(tmp_root / "nobody"), "stats")
    assert out.returncode == 3
    assert out.stderr.decode().startswith("pt2cache: ")
    started = time.monotonic()
    out = python_cli("--socket", str(tmp_root / "nobody"), "ping", "--wait", "500ms")
    assert out.returncode == 3
    assert "did not answer within 500ms" in out.stderr.decode()
    assert time.monotonic() - started >= 0.5
    assert python_cli("ping", "--wait", "5x").returncode == 2
    assert python_cli("frobnicate").returncode == 2
    out = python_cli("--help")
    assert out.returncode == 0 and b"stats" in out.stdout


def test_python_stats_zero_resets_like_the_cli(client, daemon):
    for i in range(4):
        client.put("fx-graph", f"z{i}", b"v")
        client.get("fx-graph", f"z{i}")
    before = json.loads(python_cli("--socket", str(daemon.socket), "stats", "--zero", "--json").stdout)
    assert sum(row["count"] for row in before["latency"] if row["op"] == "get") == 4
    after = json.loads(cxx_cli("--socket", str(daemon.socket), "stats", "--json").stdout)
    assert after["latency"] == [] and after["requests"] == []
    assert after["namespaces"]["fx-graph"]["memory"]["hits"] == 0
    client.get("fx-graph", "z0")
    out = python_cli("--socket", str(daemon.socket), "stats", "-z")
    assert out.returncode == 0 and out.stdout == b"statistics zeroed\n", out
    assert json.loads(cxx_cli("--socket", str(daemon.socket), "stats", "--json").stdout)["latency"] == []
