"""pt2cache.triton.Backend, Triton's remote-cache backend, against the real
daemon. Triton itself is not installed where these tests run (it comes with
torch: tools/e2e-torch --triton drives Triton's real RemoteCacheManager with
this backend), so the backend is driven directly through the interface
RemoteCacheManager uses (triton/runtime/cache.py, Triton 3.x):
``Backend(key)``, ``get([filename, ...]) -> {filename: bytes}`` leaving out
the files it does not have, ``put(filename, data)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import pt2cache
from pt2cache import triton as pt_triton
from test_pyclient_torch import run_python

# Two distinct kernels' cache keys, as get_cache_manager() makes them
# (base32 of a sha256, 52 characters).
KEY_A = "A" * 20 + "KERNELONE" + "2" * 23
KEY_B = "A" * 20 + "KERNELTWO" + "2" * 23


def kernel_files(tag: str) -> dict:
    """A group of files like the ones Triton writes for a kernel."""
    return {
        f"{tag}.json": json.dumps({"name": tag, "num_warps": 4}).encode(),
        f"{tag}.ttir": f"module {{ tt.func @{tag}() }}\n".encode(),
        f"{tag}.so": bytes(range(256)) * 64,
        f"__grp__{tag}.json": json.dumps({"child_paths": [f"{tag}.json", f"{tag}.so"]}).encode(),
    }


def test_put_then_get_round_trips_every_file(client):
    files = kernel_files("add_kernel")
    writer = pt_triton.Backend(KEY_A, client=client)
    for name, data in files.items():
        assert writer.put(name, data) is None
    reader = pt_triton.Backend(KEY_A, client=client)
    assert reader.get(list(files)) == files
    assert reader.get(["add_kernel.so"]) == {"add_kernel.so": files["add_kernel.so"]}
    # Each file is one entry of the triton namespace under <key>/<filename>.
    for name, data in files.items():
        assert client.get("triton", f"{KEY_A}/{name}") == data


def test_missing_files_are_left_out(client):
    backend = pt_triton.Backend(KEY_A, client=client)
    assert backend.get([]) == {}
    assert backend.get(["absent.json"]) == {}
    backend.put("present.cubin", b"\x7fELF")
    assert backend.get(["absent.json", "present.cubin", "absent.so"]) == {
        "present.cubin": b"\x7fELF"}


def test_kernels_with_different_keys_never_share_files(client):
    a = pt_triton.Backend(KEY_A, client=client)
    b = pt_triton.Backend(KEY_B, client=client)
    a.put("kernel.json", b'{"kernel": "a"}')
    assert b.get(["kernel.json"]) == {}
    b.put("kernel.json", b'{"kernel": "b"}')
    assert a.get(["kernel.json"]) == {"kernel.json": b'{"kernel": "a"}'}
    assert b.get(["kernel.json"]) == {"kernel.json": b'{"kernel": "b"}'}


def test_large_and_empty_and_text_values(client):
    backend = pt_triton.Backend(KEY_B, client=client)
    big = os.urandom(1 << 20) * 24  # 24 MiB, larger than any cubin seen
    backend.put("big.cubin", big)
    assert backend.get(["big.cubin"])["big.cubin"] == big
    # RemoteCacheManager encodes str itself; the backend accepts both.
    backend.put("source.ttgir", "// ttgir ü\n")
    assert backend.get(["source.ttgir"]) == {"source.ttgir": "// ttgir ü\n".encode()}
    backend.put("memoryview.bin", memoryview(b"abc"))
    assert backend.get(["memoryview.bin"]) == {"memoryview.bin": b"abc"}


def test_a_file_name_too_long_for_a_key_still_gets_its_own_entry(client):
    backend = pt_triton.Backend(KEY_A, client=client)
    long_a = "a" * 1100 + ".json"
    long_b = "a" * 1100 + ".so"
    backend.put(long_a, b"A")
    backend.put(long_b, b"B")
    assert backend.get([long_a, long_b]) == {long_a: b"A", long_b: b"B"}
    assert pt_triton.entry_key(KEY_A, long_a) != pt_triton.entry_key(KEY_A, long_b)
    assert len(pt_triton.entry_key(KEY_A, long_a).encode()) <= 1024
    assert pt_triton.entry_key(KEY_A, "x.json") == f"{KEY_A}/x.json"
    # A short name cannot be the long one's hashed form.
    forged = "#sha256:" + hashlib.sha256(long_a.encode()).hexdigest()
    assert pt_triton.entry_key(KEY_A, forged) != pt_triton.entry_key(KEY_A, long_a)
    backend.put(forged, b"F")
    assert backend.get([long_a, forged]) == {long_a: b"A", forged: b"F"}


def test_without_a_daemon_gets_miss_and_puts_do_not_raise(tmp_root):
    client = pt2cache.Client(tmp_root / "absent.sock")
    backend = pt_triton.Backend(KEY_A, client=client)
    start = time.perf_counter()
    for i in range(50):
        assert backend.put(f"f{i}.json", b"x") is None
        assert backend.get([f"f{i}.json", "g.so"]) == {}
    assert time.perf_counter() - start < 2.0


def test_a_daemon_that_dies_turns_into_misses(daemon):
    client = pt2cache.Client(daemon.socket, retry_after=0.1)
    backend = pt_triton.Backend(KEY_A, client=client)
    backend.put("k.json", b"{}")
    assert backend.get(["k.json"]) == {"k.json": b"{}"}
    daemon.kill()
    assert backend.get(["k.json"]) == {}
    assert backend.put("k2.json", b"{}") is None


def test_default_client_follows_pt2cache_socket(daemon):
    """Built the way Triton builds it, Backend(key), in a fresh process: the
    daemon is $PT2CACHE_SOCKET's; and Triton's loader accepts the class (it
    requires a class named RemoteCacheBackend in the MRO)."""
    out = run_python(f'''
        import json
        from pt2cache.triton import Backend
        b = Backend({KEY_B!r})
        b.put("kernel.json", b"{{}}")
        print(json.dumps({{"got": {{k: v.decode() for k, v in b.get(["kernel.json"]).items()}},
                          "mro": [c.__name__ for c in Backend.mro()]}}))
    ''', [], env={"PT2CACHE_SOCKET": str(daemon.socket)})
    assert out["got"] == {"kernel.json": "{}"}
    assert "RemoteCacheBackend" in out["mro"]
    client = pt2cache.Client(daemon.socket, strict=True)
    assert client.get("triton", f"{KEY_B}/kernel.json") == b"{}"


def test_imports_without_triton():
    out = run_python('''
        import json, sys
        sys.modules["triton"] = None  # any import of triton now fails
        import pt2cache.triton as t
        print(json.dumps({"base": t.Backend.__mro__[1].__module__,
                          "methods": sorted(m for m in ("get", "put") if hasattr(t.Backend, m))}))
    ''', [])
    assert out == {"base": "pt2cache.triton", "methods": ["get", "put"]}
