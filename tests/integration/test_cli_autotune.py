"""`pt2cache bundle ls|show` and `pt2cache autotune show` against a real pt2cached.

Best-configs are written as Inductor writes them (json.dumps of the dict
AutotuneCache.save builds, under the keys it derives with hashlib), and
bundles are made by the daemon itself through BUNDLE_BEGIN / PUT / BUNDLE_END.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct

import pytest
from integ_helpers import NativeClient, put_body
from pt2harness import STATUS, frame, run_cli

OK, MISS, USAGE, UNREACHABLE, SERVER = 0, 1, 2, 3, 4
BUNDLE_BEGIN, BUNDLE_END, PUT = 0x20, 0x21, 4
BUNDLE_FLAG = 0x80

TORCH_KEY = bytes(range(0xF0, 0x100)) + bytes(range(16))
BACKEND_HASH = "B1F2C3D4E5-cuda-sm90"


def err(result) -> str:
    return result.stderr.decode(errors="replace")


def out(result) -> str:
    return result.stdout.decode(errors="replace")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def kernel_keys(filename: str, configs_hash: str, tag: str = "") -> tuple[str, str]:
    """(local key, remote-form key) as AutotuneCache derives them."""
    prepared = sha256_hex(f"{os.path.basename(filename)}:{tag}")
    hasher = hashlib.sha256()
    hasher.update(prepared.encode("utf-8"))
    hasher.update(TORCH_KEY)
    local = f"{hasher.hexdigest()}.best_config"
    remote = sha256_hex(TORCH_KEY.hex() + BACKEND_HASH + configs_hash + "autotune-best-config-v2")
    return local, f"{remote}::{prepared}"


def best_config(kwargs: dict, num_warps: int, num_stages: int, configs_hash: str,
                found_by_coordesc=False, time_taken_ns=0, triton_cache_hash=None,
                warp_spec: tuple[int, int] | None = None) -> bytes:
    """json.dumps of AutotuneCache.save's dict."""
    data = {
        **kwargs,
        "num_warps": num_warps,
        "num_stages": num_stages,
        "configs_hash": configs_hash,
        "found_by_coordesc": found_by_coordesc,
        "time_taken_ms": time_taken_ns // 1000000,
        "triton_cache_hash": triton_cache_hash,
    }
    if warp_spec is not None:
        data.update({"num_consumer_groups": warp_spec[0], "num_buffers_warp_spec": warp_spec[1]})
    return json.dumps(data).encode("ascii")


class BundleClient(NativeClient):
    """A native connection that asks for the BUNDLE capability."""

    def __init__(self, path):
        super().__init__(path, hello=False)
        name = b"pytest-bundles"
        self.send(frame(1, struct.pack("<HIB", 1, 3, len(name)) + name))
        _, status, _, body = self.reply()
        assert status == STATUS["ok"]
        (caps,) = struct.unpack_from("<I", body, 2)
        assert caps & 2, "pt2cached does not offer bundles"

    def bundle_begin(self, code_hash: str, backend_hash: str = BACKEND_HASH):
        code, backend = code_hash.encode(), backend_hash.encode()
        body = struct.pack("<H", len(code)) + code + struct.pack("<H", len(backend)) + backend
        status, reply = self.request(BUNDLE_BEGIN, body)
        assert status == STATUS["ok"], reply
        token, hit, entries, saved = struct.unpack("<QBIQ", reply)
        return token, bool(hit), entries, saved

    def put_bundled(self, token: int, key: str, value: bytes):
        status, reply = self.request(
            PUT, struct.pack("<Q", token) + put_body("autotune", key.encode(), value),
            flags=BUNDLE_FLAG)
        assert status == STATUS["ok"], reply

    def bundle_end(self, token: int) -> int:
        status, reply = self.request(BUNDLE_END, struct.pack("<Q", token))
        assert status == STATUS["ok"], reply
        return struct.unpack("<I", reply)[0]


def make_bundle(daemon, code_hash: str, kernels: dict[str, bytes]) -> str:
    """Bundles `kernels` ({local key: record}) through the daemon; returns the bundle key."""
    conn = BundleClient(daemon.socket)
    try:
        token, hit, _, _ = conn.bundle_begin(code_hash)
        assert not hit
        for key, record in kernels.items():
            conn.put_bundled(token, key, record)
        assert conn.bundle_end(token) == len(kernels)
    finally:
        conn.close()
    return sha256_hex(code_hash + BACKEND_HASH + "bundled-autotune-best-configs-v1")


CONFIGS_HASH = hashlib.sha256(b"[('R0_BLOCK', 8), ('XBLOCK', 64)] 4 1\n").hexdigest()


def test_autotune_show_local_entry(daemon):
    local, _ = kernel_keys("/tmp/torchinductor_u/ab/cabkernel.py", CONFIGS_HASH)
    record = best_config({"XBLOCK": 64, "R0_BLOCK": 8}, 4, 1, CONFIGS_HASH,
                         time_taken_ns=1_234_567_890, triton_cache_hash="f00dfeed")
    assert daemon.cli("put", "autotune", local, input=record).returncode == OK

    r = daemon.cli("autotune", "show", local)
    assert (r.returncode, err(r)) == (OK, ""), err(r)
    assert out(r) == (
        f"best-config {local}\n"
        "  kwargs             XBLOCK=64, R0_BLOCK=8\n"
        "  num_warps          4\n"
        "  num_stages         1\n"
        f"  configs_hash       {CONFIGS_HASH}\n"
        "  found_by_coordesc  no\n"
        "  time_taken_ms      1234 ms\n"
        "  triton_cache_hash  f00dfeed\n")


def test_autotune_show_remote_form_and_warp_spec(daemon):
    _, remote = kernel_keys("kernel.py", CONFIGS_HASH, tag="tag")
    record = best_config({"XBLOCK": 32, "ratio": 0.5, "name": "r\u00e9"}, 8, 2, CONFIGS_HASH,
                         found_by_coordesc=True, warp_spec=(2, 3))
    assert daemon.cli("put", "autotune", remote, input=record).returncode == OK
    r = daemon.cli("autotune", "show", remote)
    assert r.returncode == OK, err(r)
    text = out(r)
    assert text.startswith(f"best-config {remote}\n")
    assert "  kwargs                 XBLOCK=32, ratio=0.5, name='r\u00e9'\n" in text
    assert "  found_by_coordesc      yes\n" in text
    assert "  triton_cache_hash      (none)\n" in text
    assert "  num_consumer_groups    2\n" in text
    assert "  num_buffers_warp_spec  3\n" in text


def test_autotune_show_errors(daemon, tmp_root):
    key = "0" * 64 + ".best_config"
    r = daemon.cli("autotune", "show", key)
    assert (r.returncode, r.stdout) == (MISS, b"")
    assert err(r) == f'pt2cache: no best-config "{key}" in autotune\n'

    assert daemon.cli("put", "autotune", key, input=b"{not json").returncode == OK
    r = daemon.cli("autotune", "show", key)
    assert (r.returncode, r.stdout) == (SERVER, b"")
    assert "is not a best-config: a best-config must be JSON" in err(r)

    r = daemon.cli("put", "autotune", key, input=b'{"XBLOCK": 8, "num_warps": 4}')
    assert r.returncode == OK
    r = daemon.cli("autotune", "show", key)
    assert r.returncode == SERVER
    assert 'best-config field "num_stages" is missing' in err(r)

    r = run_cli("--socket", str(tmp_root / "absent.sock"), "autotune", "show", key)
    assert r.returncode == UNREACHABLE, err(r)
    assert "absent.sock" in err(r)


@pytest.mark.parametrize("args", [
    ["autotune"], ["autotune", "show"], ["autotune", "ls"], ["bundle"], ["bundle", "show"],
    ["bundle", "rm", "k"], ["autotune", "show", "x" * 1025], ["bundle", "ls", "extra"],
])
def test_usage_errors(daemon, args):
    r = daemon.cli(*args)
    assert (r.returncode, r.stdout) == (USAGE, b""), (args, out(r), err(r))
    assert err(r).startswith("pt2cache: ")


def test_help_lists_the_commands(daemon):
    r = daemon.cli("--help")
    assert r.returncode == OK
    assert "bundle" in out(r) and "autotune" in out(r)
    r = daemon.cli("bundle", "--help")
    assert r.returncode == OK
    assert "ls" in out(r) and "show" in out(r)


def test_bundle_ls_and_show(daemon):
    r = daemon.cli("bundle", "ls")
    assert (r.returncode, r.stdout, r.stderr) == (OK, b"", b""), err(r)

    kernels = {}
    for i in range(3):
        local, _ = kernel_keys(f"/tmp/torchinductor_u/k{i}/kernel{i}.py", CONFIGS_HASH)
        kernels[local] = best_config({"XBLOCK": 64 << i, "R0_BLOCK": 8}, 4, 1, CONFIGS_HASH,
                                     time_taken_ns=(i + 1) * 1_000_000_000,
                                     triton_cache_hash=f"t{i}")
    key = make_bundle(daemon, "codehash-one", kernels)
    small = make_bundle(daemon, "codehash-two", dict(list(kernels.items())[:1]))
    stored = json.dumps({k: json.loads(v) for k, v in kernels.items()}).encode()
    r = daemon.cli("get", "autotune-bundle", key)
    assert (r.returncode, r.stdout) == (OK, stored), err(r)

    r = daemon.cli("bundle", "ls")
    assert r.returncode == OK, err(r)
    lines = out(r).splitlines()
    assert lines[0].split() == ["KEY", "ENTRIES", "SIZE", "MODIFIED"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {key, small}
    assert rows[key][1] == "3" and rows[small][1] == "1"
    assert " ".join(rows[key][2:4]) in (f"{len(stored)} B", f"{len(stored) / 1024:.1f} KiB")

    r = daemon.cli("bundle", "show", key)
    assert (r.returncode, err(r)) == (OK, ""), err(r)
    text = out(r)
    assert text.startswith(f"bundle {key}: 3 best-configs, 6000 ms of autotuning\n")
    blocks = text.split("\n\n")[1:]
    assert [block.splitlines()[0] for block in blocks] == list(kernels)
    assert "  kwargs             XBLOCK=256, R0_BLOCK=8\n" in blocks[2]
    assert "  triton_cache_hash  t2\n" in blocks[2]
    assert "  time_taken_ms      3000 ms\n" in blocks[2]


def test_bundle_show_errors_and_odd_bundles(daemon, tmp_root):
    r = daemon.cli("bundle", "show", "f" * 64)
    assert (r.returncode, r.stdout) == (MISS, b"")
    assert err(r) == f'pt2cache: no bundle "{"f" * 64}" in autotune-bundle\n'

    assert daemon.cli("put", "autotune-bundle", "broken", input=b"{nope").returncode == OK
    r = daemon.cli("bundle", "show", "broken")
    assert (r.returncode, r.stdout) == (SERVER, b"")
    assert "bundle broken is not valid JSON" in err(r)
    assert daemon.cli("put", "autotune-bundle", "list", input=b"[1, 2]").returncode == OK
    r = daemon.cli("bundle", "show", "list")
    assert r.returncode == SERVER and "is a JSON array, not an object" in err(r)

    # A bundle with an entry that is not a best-config still shows the rest.
    local, _ = kernel_keys("kernel.py", CONFIGS_HASH)
    odd = b'{"%s": %s, "other.best_config": [1, 2]}' % (
        local.encode(), best_config({"XBLOCK": 8}, 2, 1, CONFIGS_HASH))
    assert daemon.cli("put", "autotune-bundle", "odd", input=odd).returncode == OK
    r = daemon.cli("bundle", "show", "odd")
    assert r.returncode == OK, err(r)
    assert "\nother.best_config\n  not a best-config (a best-config is a JSON object, not " \
           "array):\n  [1, 2]\n" in out(r)
    assert "  kwargs             XBLOCK=8\n" in out(r)

    r = daemon.cli("bundle", "ls")
    rows = {line.split()[0]: line.split()[1] for line in out(r).splitlines()[1:]}
    assert rows == {"broken": "invalid", "list": "invalid", "odd": "2"}

    # Nested 50,000 deep (100 KB): past the JSON depth limit, not a crash
    # (it overflowed the stack).
    deep = b'{"x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    assert daemon.cli("put", "autotune-bundle", "deep", input=deep).returncode == OK
    r = daemon.cli("bundle", "show", "deep")
    assert r.returncode == SERVER and "bundle deep is not valid JSON" in err(r), err(r)

    for args in (["bundle", "ls"], ["bundle", "show", "k"]):
        r = run_cli("--socket", str(tmp_root / "absent.sock"), *args)
        assert r.returncode == UNREACHABLE, (args, err(r))


def test_bundle_ls_pages(daemon):
    # More bundles than one LIST page of `bundle ls` (64).
    conn = NativeClient(daemon.socket)
    try:
        for i in range(150):
            body = json.dumps({f"{i:064x}.best_config": {"num_warps": 4}}).encode()
            assert conn.put("autotune-bundle", f"b{i:03}".encode(), body) == STATUS["ok"]
    finally:
        conn.close()
    r = daemon.cli("bundle", "ls")
    assert r.returncode == OK, err(r)
    rows = [line.split() for line in out(r).splitlines()[1:]]
    assert sorted(row[0] for row in rows) == [f"b{i:03}" for i in range(150)]
    assert all(row[1] == "1" for row in rows)
