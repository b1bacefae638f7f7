"""Helpers of the Python client tests: feature probes, Redis access through
redis-py, a reimplementation of Inductor's bundle loader, and best-config
fixtures computed without the package."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

from pt2harness import RawConnection, frame

# The package under test, from the source tree ($PT2CACHE_SOURCE is set by
# meson's pytest_env).
_SOURCE = Path(os.environ.get("PT2CACHE_SOURCE") or Path(__file__).resolve().parents[3])
PACKAGE_SRC = _SOURCE / "client" / "python" / "src"

OP_BUNDLE_BEGIN = 0x20
STATUS_UNKNOWN_OP = 0x12


def bundle_ops_available(socket_path) -> bool:
    """False when the daemon answers BUNDLE_BEGIN with UNKNOWN_OP."""
    conn = RawConnection(socket_path).hello()
    try:
        code, backend = b"probe-code", b"probe-backend"
        body = struct.pack("<H", len(code)) + code + struct.pack("<H", len(backend)) + backend
        conn.send(frame(OP_BUNDLE_BEGIN, body, rid=2))
        _, status, _, _ = conn.reply()
        return status != STATUS_UNKNOWN_OP
    finally:
        conn.close()


def remote_tier_available(make_daemon, env) -> bool:
    probe = make_daemon(env=env, sub="probe-remote")
    try:
        out = probe.cli("stats", "--json", check=True)
        return json.loads(out.stdout)["tiers"].get("remote") is not None
    finally:
        probe.kill()


# ---------------------------------------------------------------- Redis


def _redis_python() -> Optional[str]:
    venvs = os.environ.get("PT2CACHE_VENVS")
    if venvs:
        candidate = Path(venvs) / "redis8" / "bin" / "python"
        if candidate.exists():
            return str(candidate)
    return None


def _redis_call(socket_path, method: str, *args: bytes):
    """redis.Redis.from_url("unix://...").<method>(*args) with redis-py: in
    this interpreter when it has redis-py, else in .venv/redis8's."""
    url = f"unix://{socket_path}"
    try:
        import redis
    except ImportError:
        python = _redis_python()
        if python is None:
            raise RuntimeError("redis-py is not available (no .venv/redis8)")
        script = (
            "import sys, redis, json\n"
            "args = [bytes.fromhex(a) for a in sys.argv[3:]]\n"
            "r = getattr(redis.Redis.from_url(sys.argv[1]), sys.argv[2])(*args)\n"
            "out = r.hex() if isinstance(r, bytes) else (None if r is None else "
            "[x.hex() for x in r] if isinstance(r, list) else r)\n"
            "print(json.dumps(out))\n")
        done = subprocess.run([python, "-c", script, url, method, *(a.hex() for a in args)],
                              capture_output=True, check=True, timeout=60)
        out = json.loads(done.stdout)
        if isinstance(out, str):
            return bytes.fromhex(out)
        if isinstance(out, list):
            return [bytes.fromhex(x) for x in out]
        return out
    client = redis.Redis.from_url(url)
    try:
        return getattr(client, method)(*args)
    finally:
        client.close()


def redis_get(socket_path, key: str) -> Optional[bytes]:
    return _redis_call(socket_path, "get", key.encode())


def redis_set(socket_path, key: str, value: bytes) -> None:
    _redis_call(socket_path, "set", key.encode(), value)


def redis_keys(socket_path, pattern: str = "*") -> list:
    return sorted(k.decode() for k in _redis_call(socket_path, "keys", pattern.encode()))


# ---------------------------------------------------------------- Inductor


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def inductor_bundle_key(code_hash: str, backend_hash: str) -> str:
    return sha256_hex(code_hash + backend_hash + "bundled-autotune-best-configs-v1")


def inductor_bundle_redis_key(code_hash: str, backend_hash: str) -> str:
    return f"pt2:bundled-autotune-v1::{inductor_bundle_key(code_hash, backend_hash)}:c1"


def inductor_local_basename(kernel_filename: str, torch_key: bytes, tag: str = "") -> str:
    inner = sha256_hex(f"{os.path.basename(kernel_filename)}:{tag}")
    h = hashlib.sha256()
    h.update(inner.encode("utf-8"))
    h.update(torch_key)
    return h.hexdigest() + ".best_config"


def inductor_best_config(kwargs: dict, num_warps: int, num_stages: int, configs_hash: str,
                         time_taken_ms: int, found_by_coordesc=False,
                         triton_cache_hash=None) -> dict:
    return {**kwargs, "num_warps": num_warps, "num_stages": num_stages,
            "configs_hash": configs_hash, "found_by_coordesc": found_by_coordesc,
            "time_taken_ms": time_taken_ms, "triton_cache_hash": triton_cache_hash}


def inductor_load_bundle(raw: Optional[bytes], cache_dir: Path) -> Optional[Dict[str, Path]]:
    """A reimplementation of Inductor's _AutotuneCacheBundlerImpl._load_cache
    (torch/_inductor/runtime/autotune_cache.py) given the Redis value: None on
    a miss (absent or not a JSON object, as RemoteBundledAutotuneCache.get
    returns it), else writes every entry where codecache.get_path(root, ext)
    puts it (cache_dir/root[1:3]/root.ext) through LocalAutotuneCache's serde
    (json.dumps) and returns {basename: path}."""
    if not raw:
        return None
    entries = json.loads(raw)  # RemoteCacheJsonSerde.decode
    if entries is None or not isinstance(entries, dict):
        return None
    written = {}
    time_saved_ns = 0
    for basename, data in entries.items():
        root, ext = os.path.splitext(basename)
        if ext:
            ext = ext[1:]
        path = cache_dir / root[1:3] / f"{root}.{ext}"
        if isinstance(data, dict) and (tsns := data.get("time_saved_ns")):
            time_saved_ns += int(tsns)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(json.dumps(data), "ascii"))
        written[basename] = path
    return written


def python_executable() -> str:
    return sys.executable
