"""Entry files the filesystem will not let the daemon delete (a read-only
remount, EACCES, EIO; here an LD_PRELOAD shim compiled by the test fails
unlink and rename of entry files while a mark file exists). A put or delete
that could not remove the older file it replaced must never let that file be
served again: not at once, not once the filesystem lets go, not after a
restart."""

from __future__ import annotations

import os
import subprocess
import time

import redis
from pt2harness import drain_disk_queue

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
/* While DIR/fail exists, unlink and rename onto an entry file fail with
   EACCES; while DIR/slow exists, a rename onto one first sleeps 0.5 s (the
   disk writers are busy, and later writes wait in the queue). */
static int marked(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", DIR, name);
    return access(path, F_OK) == 0;
}
int unlink(const char *path) {
    static int (*real)(const char *);
    if (!real) real = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    if (strstr(path, "/v1/") && !strstr(path, ".tmp") && marked("fail")) {
        errno = EACCES;
        return -1;
    }
    return real(path);
}
int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    if (strstr(to, "/v1/") && marked("slow")) usleep(500000);
    if (strstr(to, "/v1/") && marked("fail")) {
        errno = EACCES;
        return -1;
    }
    return real(from, to);
}
"""


def shimmed_daemon(make_daemon, tmp_root):
    marks = tmp_root / "marks"
    marks.mkdir()
    source = tmp_root / "undeletable.c"
    source.write_text(f'#define DIR "{marks}"\n' + SHIM)
    shim = tmp_root / "undeletable.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(shim), str(source), "-ldl"],
                   check=True)
    # No memory tier: every GET reads the disk tier.
    d = make_daemon("--set", "memory.max_size=0", env={"LD_PRELOAD": str(shim)})
    return d, marks


def connect(d) -> redis.Redis:
    return redis.Redis(unix_socket_path=str(d.socket), socket_timeout=30)


def value(tag: bytes) -> bytes:
    return tag + os.urandom(30000)  # incompressible, over 16 KiB: a file


def served_after_the_filesystem_lets_go(d, marks, key: str):
    """What GET `key` answers once deletes work again and the daemon has
    retried (every second), and after a restart."""
    for mark in marks.iterdir():
        mark.unlink()
    time.sleep(1.5)
    later = connect(d).get(key)
    d.restart()
    return later, connect(d).get(key)


def test_a_failed_write_never_leaves_the_file_it_replaced_readable(make_daemon, tmp_root):
    """SET v2 is acknowledged from the write queue; its writer cannot rename
    the new file into place nor remove the older one (v1). The key is a miss
    from then on: the old daemon served v1 (a review: 10 of 10)."""
    d, marks = shimmed_daemon(make_daemon, tmp_root)
    c = connect(d)
    assert c.set("victim", value(b"V1"))
    drain_disk_queue(d)
    (marks / "fail").touch()
    assert c.set("victim", value(b"V2"))
    drain_disk_queue(d)
    got = c.get("victim")
    assert got is None or got.startswith(b"V2"), got[:2]
    assert d.stats()["namespaces"]["redis"]["disk"]["errors"] >= 1
    later, restarted = served_after_the_filesystem_lets_go(d, marks, "victim")
    assert later is None and restarted is None


def test_a_failed_delete_never_exposes_the_file_older_than_the_write_it_dropped(
        make_daemon, tmp_root):
    """SET v2 waits in the write queue (both writers busy); a DEL drops it,
    then cannot remove v1's file. The DEL fails (its connection is closed),
    and v1, older than the acknowledged v2, must not be served: the old
    daemon did."""
    d, marks = shimmed_daemon(make_daemon, tmp_root)
    c = connect(d)
    assert c.set("victim", value(b"V1"))
    drain_disk_queue(d)
    (marks / "slow").touch()
    for other in ("busy1", "busy2"):  # one for each writer, each 0.5 s
        assert c.set(other, value(b"B"))
    assert c.set("victim", value(b"V2"))  # queued behind them
    (marks / "fail").touch()
    try:
        deleted = c.delete("victim")
    except redis.ConnectionError:
        deleted = None  # a storage error during DEL closes the connection
    assert deleted is None, "the file was removed: the shim did not fail the unlink"
    assert "DEL not served" in d.log()
    got = connect(d).get("victim")
    assert got is None, got[:2]
    later, restarted = served_after_the_filesystem_lets_go(d, marks, "victim")
    assert later is None and restarted is None


def test_a_small_put_after_a_failed_one_never_uncovers_the_older_file(make_daemon, tmp_root):
    """After a failed put left V1's file (marked replaced, forgotten by the
    index), a small SET of the key went to small.mdb without trying to remove
    the file the index no longer knew, and cleared the mark: once the small
    value expired, V1 was served, and after a restart (a review: 4 of 4)."""
    d, marks = shimmed_daemon(make_daemon, tmp_root)
    c = connect(d)
    assert c.set("victim", value(b"V1"))
    drain_disk_queue(d)
    (marks / "fail").touch()
    assert c.set("victim", value(b"V2"))  # fails: V1's file stays, marked
    drain_disk_queue(d)
    assert c.set("victim", b"V3small", ex=1)
    drain_disk_queue(d)
    time.sleep(1.5)  # V3 (if it was written) has expired
    got = c.get("victim")
    assert got is None, got[:2]
    later, restarted = served_after_the_filesystem_lets_go(d, marks, "victim")
    assert later is None and restarted is None
