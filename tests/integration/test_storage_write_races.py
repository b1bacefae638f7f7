"""Concurrent writes of the same key: whatever order they take, every tier
ends in the state of the last one acknowledged, and no write acknowledged is
undone afterwards (by a RESTORE that checked before it, a DELETE that crossed
it, or a bundle's background disk copy). Found by a review; each test fails
on the daemon before the fix (the stripe's mutex held by every local write)."""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time

from integ_helpers import NativeClient, put_body
from pt2harness import OP, frame, key_body

OK, MISS, NOT_STORED = 0, 1, 2
RESTORE, DUMP, BUNDLE_BEGIN = 0x0D, 0x0C, 0x20
BATCH = 20


def race(client_a, frames_a, client_b, frames_b, n):
    """Sends both lists of frames in lock-step batches from two threads;
    returns both lists of statuses."""
    barrier = threading.Barrier(2)
    statuses = {}

    def run(name, client, frames):
        got = []
        for base in range(0, n, BATCH):
            barrier.wait(timeout=60)
            client.send(b"".join(frames[base:base + BATCH]))
            got += [client.reply()[1] for _ in range(len(frames[base:base + BATCH]))]
        statuses[name] = got

    threads = [threading.Thread(target=run, args=("a", client_a, frames_a)),
               threading.Thread(target=run, args=("b", client_b, frames_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return statuses["a"], statuses["b"]


def test_restore_without_replace_never_undoes_an_acknowledged_put(daemon):
    """RESTORE of an older value (no REPLACE) against a PUT of the same key:
    if both answer OK, the RESTORE came first and the PUT's value stays."""
    n = 30000
    keys = [b"k%d" % i for i in range(n)]
    restores = [frame(RESTORE, key_body("pgo", k) + struct.pack("<QQ", 1, 0) + b"old", rid=i)
                for i, k in enumerate(keys)]
    puts = [frame(OP["put"], put_body("pgo", k, b"new"), rid=i) for i, k in enumerate(keys)]
    a, b = NativeClient(daemon.socket, timeout=120), NativeClient(daemon.socket, timeout=120)
    restored, put = race(a, restores, b, puts, n)
    assert set(put) == {OK} and set(restored) <= {OK, NOT_STORED}
    check = NativeClient(daemon.socket)
    lost = [k for k, r in zip(keys, restored) if r == OK and check.get("pgo", k) != (OK, b"new")]
    assert lost == [], f"{len(lost)} acknowledged PUTs undone by an older RESTORE"


def test_put_and_delete_leave_both_tiers_alike(daemon):
    """A PUT (answered on the I/O thread) racing a DELETE (on a worker): the
    value served, the disk's copy (DUMP) and the value served after a restart
    agree, key by key."""
    n = 20000
    keys = [b"k%d" % i for i in range(n)]
    c = NativeClient(daemon.socket, timeout=120)
    c.put_many("pgo", {k: b"old" for k in keys})
    puts = [frame(OP["put"], put_body("pgo", k, b"new"), rid=i) for i, k in enumerate(keys)]
    deletes = [frame(OP["delete"], key_body("pgo", k), rid=i) for i, k in enumerate(keys)]
    a, b = NativeClient(daemon.socket, timeout=120), NativeClient(daemon.socket, timeout=120)
    put, deleted = race(a, puts, b, deletes, n)
    assert set(put) == {OK} and set(deleted) <= {OK, MISS}
    time.sleep(1)  # the write queue drains
    check = NativeClient(daemon.socket)
    served = [check.get("pgo", k) for k in keys]
    on_disk = [check.request(DUMP, key_body("pgo", k))[0] for k in keys]
    differ = [k for k, s, dump in zip(keys, served, on_disk) if (s[0] == OK) != (dump == OK)]
    assert differ == [], f"{len(differ)} keys where memory and disk disagree"
    check.close()
    daemon.restart()
    again = NativeClient(daemon.socket)
    changed = [k for k, s in zip(keys, served) if again.get("pgo", k) != s]
    assert changed == [], f"{len(changed)} keys answered otherwise after a restart"


def test_a_bundles_disk_copies_never_undo_a_later_write(daemon):
    """BUNDLE_BEGIN answers once a bundle's entries are in memory; their disk
    copies follow in the background. A PUT or DELETE of a restored entry
    acknowledged after BUNDLE_BEGIN stays, then and after the copies."""
    reverted = resurrected = 0
    c, c2 = NativeClient(daemon.socket, timeout=60), NativeClient(daemon.socket, timeout=60)
    for trial in range(4):
        names = [hashlib.sha256(f"{trial}-{i}".encode()).hexdigest() + ".best_config"
                 for i in range(10000)]
        bundle = {name: {"XBLOCK": i, "time_taken_ms": 1} for i, name in enumerate(names)}
        code, backend = f"code{trial}", "backend"
        key = hashlib.sha256((code + backend + "bundled-autotune-best-configs-v1").encode())
        assert c.put("autotune-bundle", key.hexdigest().encode(), json.dumps(bundle).encode()) == OK
        begin = struct.pack("<H", len(code)) + code.encode() + \
            struct.pack("<H", len(backend)) + backend.encode()
        status, reply = c.request(BUNDLE_BEGIN, begin)
        assert status == OK and reply[8] == 1  # a hit: restored
        deleted, rewritten = names[-40:-20], names[-20:]
        batch = b"".join(frame(OP["delete"], key_body("autotune", n.encode()), rid=i)
                         for i, n in enumerate(deleted))
        batch += b"".join(frame(OP["put"], put_body("autotune", n.encode(), b'{"NEW": 1}'),
                                rid=100 + i) for i, n in enumerate(rewritten))
        c2.send(batch)
        assert [c2.reply()[1] for _ in range(40)] == [OK] * 40
        time.sleep(2)  # the background copies are done
        reverted += sum(c2.get("autotune", n.encode()) != (OK, b'{"NEW": 1}') for n in rewritten)
        resurrected += sum(c2.get("autotune", n.encode())[0] != MISS for n in deleted)
    assert (reverted, resurrected) == (0, 0)
