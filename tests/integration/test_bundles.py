"""Autotune bundles against the real daemon (docs/protocol.md, "Bundles"):
BUNDLE_BEGIN / BUNDLE_END, tokens on GET and PUT, restore into the local
tiers, expiry, unknown tokens and malformed bundles."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import threading
import time

from integ_helpers import NativeClient, error_reply
from pt2harness import OP, STATUS, drain_disk_queue, frame, key_body, wait_for

OK, MISS = STATUS["ok"], STATUS["miss"]
UNKNOWN_TOKEN = STATUS["unknown_token"]
BUNDLE_BEGIN, BUNDLE_END = 0x20, 0x21
BUNDLE_FLAG = 0x80
CAP_TTL, CAP_BUNDLE = 1, 2
BACKEND = "b" * 64


# ---------------------------------------------------------------- helpers


def bundle_key(code_hash: str, backend_hash: str = BACKEND) -> str:
    """AutotuneCacheBundler.begin_compile's key."""
    key = code_hash + backend_hash + "bundled-autotune-best-configs-v1"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def local_key(name: str) -> str:
    """A `<64 hex>.best_config` basename, as _setup_local_cache makes them."""
    return hashlib.sha256(name.encode()).hexdigest() + ".best_config"


def best_config(i: int, **extra) -> dict:
    """The dict AutotuneCache.save builds."""
    return {"XBLOCK": 2 ** (i % 10), "R0_BLOCK": 64, **extra, "num_warps": 4, "num_stages": 1,
            "configs_hash": hashlib.sha256(b"configs %d" % i).hexdigest(),
            "found_by_coordesc": i % 2 == 1, "time_taken_ms": 10 * i + 1,
            "triton_cache_hash": None}


def str16(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<H", len(data)) + data


class BundleClient(NativeClient):
    """NativeClient with the bundle ops and tokens on GET and PUT."""

    def hello_caps(self, caps: int) -> int:
        name = b"bundles"
        self._next_id += 1
        self.send(frame(OP["hello"], struct.pack("<HIB", 1, caps, len(name)) + name,
                        rid=self._next_id))
        op, status, _, body = self.reply()
        assert (op, status) == (OP["hello"], OK)
        return struct.unpack_from("<I", body, 2)[0]

    def begin(self, code_hash: str, backend: str = BACKEND) -> tuple[int, bool, int, int]:
        """(token, hit, entries, time_saved_ms)."""
        status, body = self.request(BUNDLE_BEGIN, str16(code_hash) + str16(backend))
        assert status == OK, (status, body)
        token, hit, entries, saved = struct.unpack("<QBIQ", body)
        assert token != 0
        return token, bool(hit), entries, saved

    def end(self, token: int) -> tuple[int, int | bytes]:
        """(OK, entries stored) or (error status, body)."""
        status, body = self.request(BUNDLE_END, struct.pack("<Q", token))
        if status == OK:
            return status, struct.unpack("<I", body)[0]
        return status, body

    def tget(self, token: int, ns: str, key: str | bytes) -> tuple[int, bytes]:
        key = key.encode() if isinstance(key, str) else key
        return self.request(OP["get"], struct.pack("<Q", token) + key_body(ns, key),
                            flags=BUNDLE_FLAG)

    def tput(self, token: int, ns: str, key: str | bytes, value: bytes) -> int:
        key = key.encode() if isinstance(key, str) else key
        body = struct.pack("<Q", token) + key_body(ns, key) + struct.pack("<Q", 0) + value
        return self.request(OP["put"], body, flags=BUNDLE_FLAG)[0]


def corrupt_count(conn) -> int:
    tiers = conn.stats()["namespaces"].get("autotune-bundle", {})
    return tiers.get("memory", {}).get("corrupt", 0)


def restart_without_local_autotune(d):
    """Restart (empties memory) and remove the autotune namespace from disk
    (files and small.mdb: CLEAR, then the directory for good measure)."""
    assert d.cli("clear", "autotune", "--yes").returncode == 0
    d.stop()
    shutil.rmtree(d.cache_dir / "v1" / "autotune", ignore_errors=True)
    d.start()


# ------------------------------------------------------------------ tests


def test_hello_offers_the_bundle_capability(daemon):
    conn = BundleClient(daemon.socket, hello=False)
    assert conn.hello_caps(CAP_TTL | CAP_BUNDLE) == CAP_TTL | CAP_BUNDLE
    conn = BundleClient(daemon.socket, hello=False)
    assert conn.hello_caps(CAP_TTL | 0x100) == CAP_TTL


def test_bundle_miss_collect_end_then_restore_after_local_wipe(daemon):
    d = daemon
    conn = BundleClient(d.socket)
    code_hash = "c" + "q" * 51
    token, hit, entries, saved = conn.begin(code_hash)
    assert (hit, entries, saved) == (False, 0, 0)

    configs = {local_key(f"kernel {i}"): best_config(i) for i in range(6)}
    for key, data in configs.items():
        assert conn.tput(token, "autotune", key, json.dumps(data).encode()) == OK
    # Served as usual but not bundled: a remote-form key, another namespace,
    # and a best-config that is not a JSON object.
    assert conn.tput(token, "autotune", "r" * 64 + "::" + "p" * 64, b"{}") == OK
    assert conn.tput(token, "fx-graph", local_key("fx"), b"{}") == OK
    assert conn.tput(token, "autotune", local_key("not json"), b"[1, 2]") == OK
    assert conn.tget(token, "autotune", local_key("absent")) == (MISS, b"")

    assert conn.end(token) == (OK, len(configs))
    # The stored bundle is json.dumps of Inductor's dict, entries in join order.
    status, stored = conn.get("autotune-bundle", bundle_key(code_hash).encode())
    assert status == OK
    assert stored == json.dumps(configs).encode()

    restart_without_local_autotune(d)
    conn = BundleClient(d.socket)
    for key in configs:
        assert conn.get("autotune", key.encode())[0] == MISS

    token, hit, entries, saved = conn.begin(code_hash)
    assert (hit, entries) == (True, len(configs))
    assert saved == sum(c["time_taken_ms"] for c in configs.values())
    for key, data in configs.items():
        assert conn.get("autotune", key.encode()) == (OK, json.dumps(data).encode())
    # The bundle exists: ending a token that restored it stores nothing.
    assert conn.end(token) == (OK, 0)
    assert conn.end(token)[0] == UNKNOWN_TOKEN


def test_hits_with_a_token_join_a_new_bundle(daemon):
    conn = BundleClient(daemon.socket)
    cached = {local_key(f"old {i}"): best_config(i) for i in range(4)}
    for key, data in cached.items():
        assert conn.put("autotune", key.encode(), json.dumps(data).encode()) == OK
    assert conn.put("autotune", local_key("junk").encode(), b"\xffnot json") == OK

    token, hit, _, _ = conn.begin("c" + "n" * 51)
    assert not hit
    order = list(reversed(cached))
    for key in order:
        assert conn.tget(token, "autotune", key) == (OK, json.dumps(cached[key]).encode())
    assert conn.tget(token, "autotune", local_key("junk"))[0] == OK
    # A newly tuned kernel joins too; a second put of a basename keeps its place.
    fresh = local_key("fresh")
    assert conn.tput(token, "autotune", fresh, json.dumps(best_config(9)).encode()) == OK
    updated = best_config(3, EXTRA=[1, 2.5])
    assert conn.tput(token, "autotune", order[0], json.dumps(updated).encode()) == OK
    assert conn.end(token) == (OK, len(cached) + 1)

    expected = {key: cached[key] for key in order}
    expected[order[0]] = updated
    expected[fresh] = best_config(9)
    status, stored = conn.get("autotune-bundle", bundle_key("c" + "n" * 51).encode())
    assert (status, stored) == (OK, json.dumps(expected).encode())


def test_one_token_from_many_connections(daemon):
    opener = BundleClient(daemon.socket)
    code_hash = "c" + "m" * 51
    token, _, _, _ = opener.begin(code_hash)
    workers, per_worker = 8, 5
    errors: list[BaseException] = []

    def work(w: int):
        try:
            conn = BundleClient(daemon.socket)
            for i in range(per_worker):
                data = best_config(w * per_worker + i)
                key = local_key(f"worker {w} kernel {i}")
                assert conn.tput(token, "autotune", key, json.dumps(data).encode()) == OK
            conn.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    closer = BundleClient(daemon.socket)
    assert closer.end(token) == (OK, workers * per_worker)
    status, stored = closer.get("autotune-bundle", bundle_key(code_hash).encode())
    assert status == OK and len(json.loads(stored)) == workers * per_worker
    # Another token on the first connection is unaffected by this one ending.
    assert opener.end(token)[0] == UNKNOWN_TOKEN


def test_unknown_ended_and_expired_tokens(make_daemon):
    d = make_daemon("--set", "bundle.idle_timeout_s=1")
    conn = BundleClient(d.socket)
    key = local_key("k")

    def unknown(status_body, token):
        status, body = status_body
        assert status == UNKNOWN_TOKEN
        (length,) = struct.unpack_from("<H", body)
        assert f"{token:016x}" in body[2:2 + length].decode()

    unknown(conn.tget(12345, "autotune", key), 12345)
    assert conn.tput(12345, "autotune", key, b"{}") == UNKNOWN_TOKEN
    # A PUT with an unknown token is not applied.
    assert conn.get("autotune", key.encode()) == (MISS, b"")
    unknown(conn.end(12345), 12345)
    unknown(conn.end(0), 0)
    conn.ping()

    token, _, _, _ = conn.begin("c" + "e" * 51)
    time.sleep(2.2)
    unknown(conn.tget(token, "autotune", key), token)
    unknown(conn.end(token), token)
    conn.ping()

    # Use keeps a token alive past the timeout.
    token, _, _, _ = conn.begin("c" + "f" * 51)
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert conn.tget(token, "autotune", key) == (MISS, b"")
        time.sleep(0.25)
    assert conn.end(token) == (OK, 0)
    unknown(conn.end(token), token)
    conn.ping()


def test_malformed_bundle_is_a_counted_miss(daemon, tmp_root):
    conn = BundleClient(daemon.socket)
    good = local_key("good")
    for n, planted in enumerate([b"{not json", b"[1, 2, 3]", b"\xff\xfe", b"null"]):
        code_hash = f"c{n}" + "z" * 50
        path = tmp_root / f"bundle{n}"
        path.write_bytes(planted)
        result = daemon.cli("put", "autotune-bundle", bundle_key(code_hash), str(path))
        assert result.returncode == 0, result.stderr
        before = corrupt_count(conn)
        token, hit, entries, saved = conn.begin(code_hash)
        assert (hit, entries, saved) == (False, 0, 0)
        assert corrupt_count(conn) == before + 1
        # Collecting goes on and BUNDLE_END replaces the malformed bundle.
        assert conn.tput(token, "autotune", good, json.dumps(best_config(1)).encode()) == OK
        assert conn.end(token) == (OK, 1)
        _, hit, entries, _ = conn.begin(code_hash)
        assert (hit, entries) == (True, 1)
    assert daemon.proc.poll() is None


def test_deeply_nested_best_configs_do_not_crash_the_daemon(daemon, tmp_root):
    """A best-config nested 100,000 deep (200 KB): put with a token, it took
    the daemon down (SIGSEGV writing the bundle JSON), and once stored as a
    bundle, again at every BUNDLE_BEGIN after a restart. Now it is not JSON
    to the daemon: not collected, a counted miss as a stored bundle."""
    deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    conn = BundleClient(daemon.socket)
    token, _, _, _ = conn.begin("d" + "e" * 51)
    assert conn.tput(token, "autotune", local_key("deep"), deep) == OK
    assert conn.tput(token, "autotune", local_key("fine"), json.dumps(best_config(3)).encode()) == OK
    assert conn.end(token) == (OK, 1)
    path = tmp_root / "deep-bundle"
    path.write_bytes(b'{"' + local_key("deep").encode() + b'": ' + deep + b"}")
    code_hash = "d" + "f" * 51
    assert daemon.cli("put", "autotune-bundle", bundle_key(code_hash), str(path)).returncode == 0
    before = corrupt_count(conn)
    assert conn.begin(code_hash)[1:] == (False, 0, 0)
    assert corrupt_count(conn) == before + 1
    assert daemon.proc.poll() is None
    conn.ping()
    # The second BUNDLE_BEGIN's token is still open (nothing collected yet).
    bundles = conn.stats()["bundles"]
    assert bundles["open"] == 1 and bundles["bytes"] == 0, bundles
    assert (bundles["dropped"], bundles["overflowed"]) == (0, 0), bundles


def test_bundle_entries_that_cannot_be_restored_are_skipped(daemon, tmp_root):
    conn = BundleClient(daemon.socket)
    good = local_key("restorable")
    bundle = {good: best_config(5), "kernel.best_config": best_config(6),
              local_key("list"): [1, 2], local_key("upper").upper(): best_config(7)}
    path = tmp_root / "bundle"
    path.write_text(json.dumps(bundle))
    code_hash = "c" + "s" * 51
    assert daemon.cli("put", "autotune-bundle", bundle_key(code_hash), str(path)).returncode == 0
    token, hit, entries, saved = conn.begin(code_hash)
    assert (hit, entries, saved) == (True, 1, best_config(5)["time_taken_ms"])
    assert conn.get("autotune", good.encode()) == (OK, json.dumps(best_config(5)).encode())
    assert conn.get("autotune", b"kernel.best_config")[0] == MISS
    assert corrupt_count(conn) == 0


def test_bundle_bytes_equal_python_json_dumps(daemon):
    conn = BundleClient(daemon.socket)
    odd = {
        local_key("unicode"): best_config(1, NAME="caf\u00e9 \u20ac \U0001F600 \u2028 \"q\" \\"),
        local_key("floats"): best_config(2, F=[0.1, 1e-05, 1e16, 1e15, -0.0, 2.5, 1.0,
                                               5e-324, 1.7976931348623157e308]),
        local_key("ints"): best_config(3, I=[0, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1]),
        local_key("nested"): best_config(4, N={"z": {}, "a": [[], {"k": None}], "t": True}),
    }
    token, _, _, _ = conn.begin("c" + "u" * 51)
    for key, data in odd.items():
        # Compact, reordered-whitespace and non-ASCII text: the daemon re-writes
        # each entry as json.dumps does.
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        assert conn.tput(token, "autotune", key, text) == OK
    assert conn.end(token) == (OK, len(odd))
    status, stored = conn.get("autotune-bundle", bundle_key("c" + "u" * 51).encode())
    assert status == OK
    assert stored == json.dumps(odd).encode()

    # Restored entries are what Inductor's LocalAutotuneCache would write.
    restart_without_local_autotune(daemon)
    conn = BundleClient(daemon.socket)
    _, hit, entries, _ = conn.begin("c" + "u" * 51)
    assert (hit, entries) == (True, len(odd))
    for key, data in odd.items():
        assert conn.get("autotune", key.encode()) == (OK, json.dumps(data).encode())


def test_bundle_begin_with_an_empty_code_hash_is_malformed(daemon):
    conn = BundleClient(daemon.socket)
    conn.send(frame(BUNDLE_BEGIN, str16("") + str16(BACKEND), rid=9))
    op, status, rid, message = error_reply(conn)
    assert (op, status, rid) == (BUNDLE_BEGIN, STATUS["malformed"], 9)
    assert "code hash" in message
    assert conn.closed_by_peer()


def test_bundle_end_frees_nothing_of_other_bundles(daemon):
    conn = BundleClient(daemon.socket)
    first, _, _, _ = conn.begin("c" + "1" * 51)
    second, _, _, _ = conn.begin("c" + "1" * 51)  # the same module, twice
    assert first != second
    assert conn.tput(first, "autotune", local_key("a"), json.dumps(best_config(1)).encode()) == OK
    assert conn.tput(second, "autotune", local_key("b"), json.dumps(best_config(2)).encode()) == OK
    assert conn.end(second) == (OK, 1)
    assert conn.end(first) == (OK, 1)  # the later END overwrites: last writer wins
    status, stored = conn.get("autotune-bundle", bundle_key("c" + "1" * 51).encode())
    assert (status, json.loads(stored)) == (OK, {local_key("a"): best_config(1)})
    assert os.path.isdir(daemon.cache_dir)


def test_a_large_bundle_restores_every_entry(make_daemon):
    # Enough entries for the restore to fan out over the worker pool.
    d = make_daemon("--set", "daemon.blocking_threads=4")
    conn = BundleClient(d.socket)
    code_hash = "c" + "l" * 51
    configs = {local_key(f"large {i}"): best_config(i) for i in range(400)}
    token, _, _, _ = conn.begin(code_hash)
    for key, data in configs.items():
        assert conn.tput(token, "autotune", key, json.dumps(data).encode()) == OK
    assert conn.end(token) == (OK, len(configs))

    restart_without_local_autotune(d)
    conn = BundleClient(d.socket)
    _, hit, entries, saved = conn.begin(code_hash)
    assert (hit, entries) == (True, len(configs))
    assert saved == sum(c["time_taken_ms"] for c in configs.values())
    for key, data in configs.items():
        assert conn.get("autotune", key.encode()) == (OK, json.dumps(data).encode())
    stats = conn.stats()["namespaces"]["autotune"]
    assert stats["memory"]["hits"] == len(configs)


def test_a_large_bundle_waits_for_room_in_the_read_budget(make_daemon, tmp_root):
    """A 1.5 MiB bundle on disk, begun while another client's unread 2 MiB
    reply holds the whole read budget: BUNDLE_BEGIN read the bundle beside
    GET's way, met no room, and answered a miss at once (a review). It reads
    as GET does now: it waits, and restores the bundle once the room is
    back."""
    d = make_daemon("--set", "memory.max_size=1MiB", "--set", "daemon.max_reply_bytes=1MiB")
    configs = {local_key(f"wide {i}"): best_config(i, padding="p" * 64) for i in range(6000)}
    path = tmp_root / "bundle"
    path.write_text(json.dumps(configs))
    assert path.stat().st_size > 3 << 19
    code_hash = "c" + "w" * 51
    assert d.cli("put", "autotune-bundle", bundle_key(code_hash), str(path)).returncode == 0
    other = os.urandom(2 << 20)
    holder = NativeClient(d.socket)
    assert holder.put("other", b"large", other) == OK
    drain_disk_queue(d)
    # Its reply, left unread, keeps the value's charge until it is sent.
    holder.send(frame(OP["get"], key_body("other", b"large"), rid=5))
    wait_for(lambda: d.stats()["daemon"]["read_bytes"] >= 2 << 20, timeout=5,
             what="the unread reply to hold the read budget")
    begun = {}

    def begin():
        begun["answer"] = BundleClient(d.socket, timeout=30).begin(code_hash)
        begun["at"] = time.monotonic()

    beginner = threading.Thread(target=begin)
    beginner.start()
    time.sleep(0.5)
    assert "answer" not in begun  # waiting for room
    read_at = time.monotonic()
    assert holder.reply() == (OP["get"], OK, 5, other)
    beginner.join(timeout=30)
    _, hit, entries, _ = begun["answer"]
    assert (hit, entries) == (True, len(configs))
    assert begun["at"] - read_at < 5
    assert d.stats()["daemon"]["reads_refused"] == 0


def test_bundle_through_redis_reaches_a_fresh_daemon(make_daemon, redis_server):
    remote = ("--set", f"remote.unix_socket={redis_server.socket}",
              "--set", "remote.bundled_autotune=true")
    first = make_daemon(*remote, sub="first")
    conn = BundleClient(first.socket)
    code_hash = "c" + "r" * 51
    configs = {local_key(f"redis {i}"): best_config(i) for i in range(8)}
    token, hit, _, _ = conn.begin(code_hash)
    assert not hit
    for key, data in configs.items():
        assert conn.tput(token, "autotune", key, json.dumps(data).encode()) == OK
    assert conn.end(token) == (OK, len(configs))

    redis_key = f"pt2:bundled-autotune-v1::{bundle_key(code_hash)}:c1"
    wait_for(lambda: redis_server.cli("exists", redis_key).strip() == "1",
             what="the bundle in Redis")
    raw = subprocess.run(["redis-cli", "-s", str(redis_server.socket), "--raw", "get", redis_key],
                         capture_output=True, check=True).stdout
    assert raw.rstrip(b"\n") == json.dumps(configs).encode()
    # Per-kernel local entries never go to Redis.
    assert redis_server.cli("dbsize").strip() == "1"
    first.stop()

    fresh = make_daemon(*remote, sub="fresh")
    fresh.wait_remote()  # else the bundle may be missed, not read
    conn = BundleClient(fresh.socket)
    _, hit, entries, saved = conn.begin(code_hash)
    assert (hit, entries) == (True, len(configs))
    assert saved == sum(c["time_taken_ms"] for c in configs.values())
    for key, data in configs.items():
        assert conn.get("autotune", key.encode()) == (OK, json.dumps(data).encode())
    assert conn.stats()["namespaces"]["autotune"]["memory"]["hits"] == len(configs)


def test_restored_entries_reach_disk_in_the_background(daemon):
    """BUNDLE_BEGIN answers once the entries are in memory; their disk copies
    follow on the worker pool, so a later restart still finds them."""
    d = daemon
    conn = BundleClient(d.socket)
    code_hash = "c" + "w" * 51
    token, _, _, _ = conn.begin(code_hash)
    configs = {local_key(f"bg kernel {i}"): best_config(i) for i in range(200)}
    for key, data in configs.items():
        assert conn.tput(token, "autotune", key, json.dumps(data).encode()) == OK
    assert conn.end(token) == (OK, len(configs))

    restart_without_local_autotune(d)
    conn = BundleClient(d.socket)
    token, hit, entries, _ = conn.begin(code_hash)
    assert (hit, entries) == (True, len(configs))
    # LIST answers from the disk tier (entry files and small.mdb).
    lister = NativeClient(d.socket)
    on_disk = lambda: len(lister.list_page("autotune")[1])  # noqa: E731
    wait_for(lambda: on_disk() == len(configs), timeout=30, what="restored entries on disk")
    # Memory gone again: the per-kernel entries now come from disk.
    d.stop()
    d.start()
    conn = BundleClient(d.socket)
    for key, data in configs.items():
        assert conn.get("autotune", key.encode()) == (OK, json.dumps(data).encode())
