"""A key's older values never come back while, or after, it is deleted,
cleared, expired or conditionally replaced by a concurrent request. Found by
a review (2026-11-29); each test fails on the daemon before the fix:
- a DEL or CLEAR dropped the key's queued write (the newest value) before it
  deleted the copies on disk, which can be several acknowledged writes
  older: lookups meanwhile read them;
- a GET removing an expired entry file erased the key's index record without
  the key's lock, after a newer file had been renamed into place: the newer
  file, unknown to the index, outlived the key's next values;
- SET XX and SET KEEPTTL looked at the stored entry outside the key's write
  lock."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import redis


def connect(daemon) -> redis.Redis:
    return redis.Redis(unix_socket_path=str(daemon.socket), socket_timeout=30)


class BusyWriter:
    """Pipelined SETs of other keys, keeping the disk writer's queue busy as a
    compile does, so that a key's newest value waits in the queue."""

    def __init__(self, daemon):
        self.client = connect(daemon)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        i = 0
        while not self.stop.is_set():
            pipe = self.client.pipeline(transaction=False)
            for _ in range(50):
                pipe.set(f"busy{i % 2000}", os.urandom(200))
                i += 1
            pipe.execute()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=60)


def reads_while(client, keys, action) -> list:
    """Every value read by MGET of `keys` while `action` runs in a thread."""
    done = threading.Event()
    error = []

    def run():
        try:
            action()
        except Exception as e:  # reported below, not lost in the thread
            error.append(e)
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    seen = []
    deadline = time.monotonic() + 60
    while not done.is_set() and time.monotonic() < deadline:
        seen += client.mget(keys)
    thread.join(timeout=60)
    assert not error, error
    return seen


def test_a_delete_never_exposes_an_older_value(daemon):
    """OLD on disk, NEW acknowledged and queued, then DEL (RESP DEL, native
    DEL through `pt2cache rm`) while another connection reads: the old daemon
    returned OLD in most rounds, sometimes after NEW."""
    writer, reader, deleter = connect(daemon), connect(daemon), connect(daemon)
    stale = []
    with BusyWriter(daemon):
        for round in range(60):
            key = f"k{round % 5}"
            writer.set(key, b"OLD-%d" % round)
            time.sleep(0.15)  # OLD reaches small.mdb
            writer.set(key, b"NEW-%d" % round)  # acknowledged, in the queue
            if round % 2:
                def delete(): assert deleter.delete(key) == 1
            else:
                def delete(): daemon.cli("rm", "redis", key, check=True)
            seen = reads_while(reader, [key], delete)
            stale += [v for v in seen if v is not None and v.startswith(b"OLD")]
            assert writer.get(key) is None
    assert stale == [], f"{len(stale)} reads of a replaced value during a delete"


def test_a_clear_never_exposes_older_values(daemon):
    """The same for `pt2cache clear`: 20 keys OLD on disk, NEW queued, then a
    clear of the namespace while MGETs run."""
    writer, reader = connect(daemon), connect(daemon)
    keys = [f"c{i}" for i in range(20)]
    stale = 0
    with BusyWriter(daemon):
        for round in range(15):
            for value in (b"OLD-%d" % round, b"NEW-%d" % round):
                pipe = writer.pipeline(transaction=False)
                for k in keys:
                    pipe.set(k, value)
                pipe.execute()
                if value.startswith(b"OLD"):
                    time.sleep(0.15)  # OLD reaches small.mdb
            seen = reads_while(reader, keys,
                               lambda: daemon.cli("clear", "redis", "--yes", check=True))
            stale += sum(1 for v in seen if v is not None and v.startswith(b"OLD"))
    assert stale == 0, f"{stale} reads of replaced values during a clear"


DELAY_UNLINK = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <unistd.h>
/* Sleeps after a successful unlink of an entry file while MARK exists: it
   widens the window between the daemon's unlink and what follows. */
int unlink(const char *path) {
    static int (*real)(const char *);
    if (!real) real = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    int rc = real(path);
    if (rc == 0 && strstr(path, "/v1/") && access(MARK, F_OK) == 0) usleep(600000);
    return rc;
}
"""


def test_removing_an_expired_file_never_forgets_a_newer_one(make_daemon, tmp_root):
    """A GET finds a large entry expired and unlinks its file; before it
    erased the index record, a SET of a newer large value renamed its file
    into place. The index forgot that file, a later small value left it
    there, and once that value expired (and after a restart) the newer
    large value came back. A shim delays the GET after its unlink."""
    mark = tmp_root / "delay"
    source = tmp_root / "delay_unlink.c"
    source.write_text(f'#define MARK "{mark}"\n' + DELAY_UNLINK)
    shim = tmp_root / "delay_unlink.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(shim), str(source), "-ldl"],
                   check=True)
    d = make_daemon(env={"LD_PRELOAD": str(shim)})
    a, b = connect(d), connect(d)
    a.set("victim", b"V1" + os.urandom(30000), px=100)  # a file
    time.sleep(0.5)  # expired
    mark.touch()
    got = {}
    getter = threading.Thread(target=lambda: got.update(value=a.get("victim")))
    getter.start()
    time.sleep(0.2)  # the GET sleeps after its unlink
    newer = b"V2" + os.urandom(30000)
    assert b.set("victim", newer)
    getter.join(timeout=30)
    mark.unlink()
    assert got["value"] is None
    assert b.get("victim") == newer
    assert b.set("victim", b"V3", px=400)  # small: small.mdb
    time.sleep(0.6)
    assert b.get("victim") is None, "an overwritten value came back"
    d.restart()
    assert connect(d).get("victim") is None, "an overwritten value came back after a restart"


def race(first, second):
    """Runs first() and second() together, released by one barrier; their
    results."""
    barrier = threading.Barrier(2)
    got = {}

    def run(name, action):
        barrier.wait(timeout=30)
        got[name] = action()

    threads = [threading.Thread(target=run, args=("first", first)),
               threading.Thread(target=run, args=("second", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return got["first"], got["second"]


def test_set_xx_and_del_are_atomic(make_daemon):
    """If DEL removed the key and SET XX stored, SET XX came first and DEL
    removed its value: the key cannot be there afterwards. The old daemon
    left it there in about a quarter of the rounds with synchronous disk
    writes (which widen its window), and in 1 % with queued ones."""
    daemon = make_daemon("--set", "disk.write_mode=sync")
    setter, a, b = connect(daemon), connect(daemon), connect(daemon)
    revived = 0
    for i in range(1000):
        key = f"x{i % 10}"
        setter.set(key, b"v0")
        deleted, stored = race(lambda: a.delete(key), lambda: b.set(key, b"x%d" % i, xx=True))
        if deleted == 1 and stored and setter.get(key) is not None:
            revived += 1
    assert revived == 0, f"{revived} keys present after DEL and SET XX both acted"


def test_set_keepttl_keeps_the_expiry_it_replaces(daemon):
    """SET PX 150 and SET KEEPTTL race on a key without expiry. KEEPTTL's
    value still there 250 ms later replaced the PX value (else the PX value
    would have replaced it) and must have taken its expiry: a violation.
    The old daemon gave it the older "no expiry" in some rounds."""
    setter, a, b = connect(daemon), connect(daemon), connect(daemon)
    outlived = 0
    for batch in range(60):
        keys = [f"t{batch}-{i}" for i in range(10)]
        for key in keys:
            setter.set(key, b"v1")
            race(lambda: a.set(key, b"v2", px=150), lambda: b.set(key, b"v3", keepttl=True))
        time.sleep(0.25)
        outlived += sum(1 for v in setter.mget(keys) if v == b"v3")
    assert outlived == 0, f"{outlived} KEEPTTL values outlived the expiry they replaced"
