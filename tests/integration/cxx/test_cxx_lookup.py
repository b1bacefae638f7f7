"""CXX_LOOKUP against the real daemon (docs/protocol.md, "Compile-cache lookup"):
the outcomes, the result it hands over, the counters, and bad requests."""

from __future__ import annotations

import re
import struct
import time

import pytest

from cxx_helpers import CLI, KERNEL, KERNEL_H, counters, cxx, launcher_env, ok, run, write
from integ_helpers import NativeClient, error_reply
from pt2harness import OP, STATUS, drain_disk_queue, frame, key_body

CXX_LOOKUP = 0x0E
NO_MANIFEST, NO_MATCH, HIT, UNDECIDED = 0, 1, 2, 3


def body(common_key: bytes, rules) -> bytes:
    out = struct.pack("<H", len(common_key)) + common_key + struct.pack("<B", len(rules))
    for placeholder, directory in rules:
        p = placeholder if isinstance(placeholder, bytes) else placeholder.encode()
        d = directory if isinstance(directory, bytes) else str(directory).encode()
        out += struct.pack("<B", len(p)) + p + struct.pack("<H", len(d)) + d
    return out


def lookup(conn, common_key: bytes, rules):
    status, reply = conn.request(CXX_LOOKUP, body(common_key, rules))
    assert status == STATUS["ok"], (status, reply)
    outcome, size = struct.unpack_from("<BI", reply, 0)
    return outcome, reply[5:5 + size], reply[5 + size:]


@pytest.fixture
def built(daemon, tmp_root):
    return build_kernel(daemon, tmp_root)


def build_kernel(daemon, tmp_root):
    """A kernel built (and stored) through the launcher, and what
    `pt2cache cxx --explain` says of it: common key, rewrites, result key."""
    env = launcher_env(daemon, tmp_root / "t")
    write(tmp_root / "kernel.h", KERNEL_H)
    write(tmp_root / "k.cpp", KERNEL)
    args = ["g++", "-c", "k.cpp", "-O1", "-o", "k.o"]
    ok(cxx(args[1:], tmp_root, env))
    text = ok(run([CLI, "--socket", daemon.socket, "cxx", "--explain", "--", *args], tmp_root,
                  env)).stdout.decode()
    common = re.search(r"^common key: ([0-9a-f]{32})$", text, re.M).group(1).encode()
    section = text.split("path rewrites:\n", 1)[1].split("common key inputs", 1)[0]
    rules = [(p, d) for d, p in (line.strip().split(" -> ") for line in section.splitlines())]
    result_key = re.search(r"-> (r-[0-9a-f]{32}) \(MATCH, stored\)", text).group(1).encode()
    return common, rules, result_key


def test_hit_hands_over_the_stored_result(daemon, tmp_root, built):
    common, rules, result_key = built
    conn = NativeClient(daemon.socket)
    before = counters(daemon)
    outcome, manifest, result = lookup(conn, common, rules)
    assert outcome == HIT
    assert (STATUS["ok"], manifest) == conn.get("cxx", b"m-" + common)
    assert (STATUS["ok"], result) == conn.get("cxx", result_key)
    after = counters(daemon)
    # One lookup and one hit for CXX_LOOKUP (the GETs above add a lookup and a hit).
    assert after["lookups"] == before["lookups"] + 2 and after["hits"] == before["hits"] + 2


def test_changed_input_or_missing_rule_is_no_match(daemon, tmp_root, built):
    common, rules, _ = built
    conn = NativeClient(daemon.socket)
    # Without the rules the recorded paths keep their placeholders: nothing matches.
    outcome, manifest, result = lookup(conn, common, [])
    assert (outcome, result) == (NO_MATCH, b"") and manifest.startswith(b"PCXM")
    write(tmp_root / "kernel.h", KERNEL_H + "#define MORE 1\n")
    outcome, manifest, result = lookup(conn, common, rules)
    assert (outcome, result) == (NO_MATCH, b"") and manifest.startswith(b"PCXM")
    write(tmp_root / "kernel.h", KERNEL_H)
    assert lookup(conn, common, rules)[0] == HIT


def test_unknown_key_and_unhashable_paths(daemon, tmp_root, built):
    common, rules, _ = built
    conn = NativeClient(daemon.socket)
    assert lookup(conn, b"0" * 32, rules) == (NO_MANIFEST, b"", b"")
    # A directory so long that an expanded path passes 4,096 bytes: the daemon
    # leaves the matching to the launcher.
    long_rules = [(p, "/" + "d" * 4095 if p == "@PT2_SRCDIR@" else d) for p, d in rules]
    outcome, manifest, result = lookup(conn, common, long_rules)
    assert (outcome, result) == (UNDECIDED, b"") and manifest.startswith(b"PCXM")
    conn.ping()


@pytest.mark.parametrize("request_body", [
    body(b"", []),
    body(b"k" * 1023, []),
    body(b"k", [("@P@", "/d")] * 17),
    body(b"k", [("@P@", "relative")]),
    body(b"k", [("", "/d")]),
    body(b"k", [("@P@", b"/nul\0")]),
    body(b"k", []) + b"x",
    body(b"k", [("@P@", "/d")])[:-1],
], ids=["empty-key", "long-key", "17-rules", "relative", "no-placeholder", "nul", "trailing",
        "truncated"])
def test_bad_requests_are_malformed(daemon, request_body):
    conn = NativeClient(daemon.socket)
    conn.send(frame(CXX_LOOKUP, request_body, rid=5))
    _, status, rid, _ = error_reply(conn)
    assert (status, rid) == (STATUS["malformed"], 5)
    NativeClient(daemon.socket).ping()  # others are served


def test_launcher_hit_is_one_lookup_request(daemon, tmp_root):
    """The launcher's hit: HELLO, the compiler facts, one CXX_LOOKUP (no HASH_FILES)."""
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX_LOG="1")
    write(tmp_root / "kernel.h", KERNEL_H)
    write(tmp_root / "k.cpp", KERNEL)
    args = ["-c", "k.cpp", "-O1", "-o", "k.o"]
    ok(cxx(args, tmp_root, env))
    built = (tmp_root / "k.o").read_bytes()
    (tmp_root / "k.o").unlink()
    before = daemon.stats()
    hit = ok(cxx(args, tmp_root, env))
    after = daemon.stats()
    assert b"hit (CXX_LOOKUP)" in hit.stderr, hit.stderr
    assert (tmp_root / "k.o").read_bytes() == built
    # The second snapshot adds its own HELLO and STATS.
    assert after["daemon"]["requests"] - before["daemon"]["requests"] == 3 + 2


def test_undecided_lookup_falls_back_to_the_launchers_own_matching(make_daemon, tmp_root):
    """A daemon that cannot hash within its budget (here the debug hook makes it
    0 ms) answers CXX_LOOKUP with UNDECIDED and HASH_FILES with SKIPPED: the
    launcher then hashes the inputs itself, hits with the stored bytes, and
    misses once an input changed."""
    daemon = make_daemon(env={"PT2CACHED_DEBUG_HASH_BUDGET_MS": "0"})
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX_LOG="1")
    write(tmp_root / "kernel.h", KERNEL_H)
    write(tmp_root / "k.cpp", KERNEL)
    args = ["-c", "k.cpp", "-O1", "-o", "k.o"]
    ok(cxx(args, tmp_root, env))
    if "is ignored: this pt2cached is a release build" in daemon.log():
        pytest.skip("the hash-budget hook is compiled out of release builds")
    built = (tmp_root / "k.o").read_bytes()
    (tmp_root / "k.o").unlink()

    hit = ok(cxx(args, tmp_root, env))
    assert b"CXX_LOOKUP undecided: matching here" in hit.stderr, hit.stderr
    assert re.search(rb"^pt2cache-cxx: hit r-[0-9a-f]{32} in \d+ ms$", hit.stderr, re.M), hit.stderr
    assert (tmp_root / "k.o").read_bytes() == built
    stats = daemon.stats()
    assert stats["compile"]["cxx"]["builds"] == 1
    assert stats["file_hashes"]["hashed"] == 0  # nothing was hashed by the daemon

    write(tmp_root / "kernel.h", KERNEL_H + "#define MORE 1\n")
    changed = ok(cxx(args, tmp_root, env))
    assert b"CXX_LOOKUP undecided: matching here" in changed.stderr, changed.stderr
    assert b"miss: no manifest variant matches the inputs" in changed.stderr, changed.stderr
    assert daemon.stats()["compile"]["cxx"]["builds"] == 2


def test_rules_that_grow_paths_without_end_are_undecided_at_once(daemon, built):
    """Rules whose directories hold the next rule's placeholder multiply a
    path's length rule by rule ('/' -> 4096 slashes, twice): the daemon stops
    expanding a path once it is longer than it hashes and answers UNDECIDED
    within its budget, serving others meanwhile. It had expanded into
    gigabytes on its I/O thread, answering no one for minutes."""
    common, _, _ = built
    conn = NativeClient(daemon.socket)
    hostile = [("/", "/" * 4096), ("/", "/" * 4096), ("/", "//")]
    started = time.monotonic()
    outcome, _, _ = lookup(conn, common, hostile)
    assert outcome == UNDECIDED
    assert time.monotonic() - started < 2.5
    NativeClient(daemon.socket).ping()
    assert daemon.proc.poll() is None


def test_a_lookup_never_waits_for_room_its_own_pipelined_replies_hold(make_daemon, tmp_root):
    """A GET of a 2 MiB value on disk, then a CXX_LOOKUP whose result is 2 MiB
    on disk, sent in one write against a 1 MiB read budget: the lookup waited
    10 s for the room the GET's reply, not yet sent, held, then failed (the
    same as a GET's, fixed before for GETs only). It sends the session's
    replies before it waits now."""
    d = make_daemon("--set", "memory.max_size=1MiB", "--set", "daemon.max_reply_bytes=1MiB")
    common, rules, result_key = build_kernel(d, tmp_root)
    conn = NativeClient(d.socket)
    size = 2 << 20
    result, other = bytes(range(256)) * (size // 256), b"\x02" * size
    assert conn.put("cxx", result_key, result) == STATUS["ok"]
    assert conn.put("other", b"large", other) == STATUS["ok"]
    drain_disk_queue(d)
    started = time.monotonic()
    conn.send(frame(OP["get"], key_body("other", b"large"), rid=1) +
              frame(CXX_LOOKUP, body(common, rules), rid=2))
    assert conn.reply() == (OP["get"], STATUS["ok"], 1, other)
    op, status, rid, reply = conn.reply()
    assert (op, status, rid) == (CXX_LOOKUP, STATUS["ok"], 2), reply[:200]
    outcome, size_of_manifest = struct.unpack_from("<BI", reply, 0)
    assert (outcome, reply[5 + size_of_manifest:]) == (HIT, result)
    assert time.monotonic() - started < 5
    assert d.stats()["daemon"]["reads_refused"] == 0
