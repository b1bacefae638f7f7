"""Host names of Redis endpoints are resolved off the request path
(daemon/store/remote/host_resolver.hpp): a slow DNS answer holds no request
past its deadline, whether the name is configured (remote URL) or announced by
a cluster (CLUSTER SLOTS).

A slow DNS server is played by an LD_PRELOAD library, built here with the real
cc, whose getaddrinfo sleeps SLOW_S for names that start with "slow" and then
answers 127.0.0.1 (the test may not change the machine's resolver
configuration). Before, hiredis resolved the name in every connection it
opened, on the thread serving the request: each GET that opened one took the
lookup's time."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from pt2harness import wait_for

from hostile_cases import HostileRedis
from hostile_redis import bulk
from remote_helpers import MISS, OK, Native, fx_key, redis_args, remote_stats

OP_MS = 300
CONNECT_MS = 200
SLOW_S = 1.5
# Scheduling slack on a loaded 2-core machine.
MARGIN_S = 0.25

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <string.h>
#include <unistd.h>

typedef int (*lookup_fn)(const char*, const char*, const struct addrinfo*, struct addrinfo**);

int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                struct addrinfo** res) {
    lookup_fn real = (lookup_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    if (node != NULL && strncmp(node, "slow", 4) == 0) {
        usleep(SLOW_US);
        return real("127.0.0.1", service, hints, res);
    }
    return real(node, service, hints, res);
}
"""


@pytest.fixture
def slow_dns(tmp_root):
    """LD_PRELOAD settings whose getaddrinfo is slow for "slow*" names."""
    source = tmp_root / "slowdns.c"
    source.write_text(SHIM)
    library = tmp_root / "slowdns.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-DSLOW_US={int(SLOW_S * 1e6)}",
                    "-o", str(library), str(source), "-ldl"], check=True, timeout=60)
    return {"LD_PRELOAD": str(library)}


def _timed_get(client, inner):
    started = time.monotonic()
    status, value = client.get("fx-graph", inner)
    return status, value, time.monotonic() - started


def test_a_configured_name_is_looked_up_once_not_per_connection(make_daemon, redis_tcp,
                                                                 slow_dns):
    """redis://slowhost…: every GET within its deadline, including those
    that open a new pooled connection once the name resolved; the values
    Redis holds are served."""
    env = {"TORCHINDUCTOR_REDIS_URL": f"redis://slowhost.test:{redis_tcp.port}",
           "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", **slow_dns}
    d = make_daemon(*redis_args(op_ms=OP_MS, connect_ms=CONNECT_MS), env=env)
    keys = [fx_key(f"resolver-{i}") for i in range(6)]
    for redis_key, _ in keys:
        redis_tcp.cli("SET", redis_key, "value of " + redis_key)
    wait_for(lambda: remote_stats(d)["state"].startswith("connected"),
             what="connected once the name resolved", timeout=SLOW_S * 4 + 10)
    # Six GETs at once want six connections: each one opened resolves
    # the name again (it was one lookup per connection).
    results = []

    def one(inner):
        results.append(_timed_get(Native(d.socket), inner))

    threads = [threading.Thread(target=one, args=(inner,)) for _, inner in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(results) == len(keys)
    slowest = max(r[2] for r in results)
    assert slowest < OP_MS / 1000 + MARGIN_S, results
    assert all(r[0] == OK for r in results), (results, d.log()[-2000:])
    assert {r[1] for r in results} == {b"value of " + k.encode() for k, _ in keys}


def test_a_name_a_cluster_announces_holds_no_request(make_daemon, tmp_root, slow_dns):
    """The seed (an address) says every slot is on slowhost.test: the first
    GET is answered (a miss) within its deadline while the name resolves in
    the background; once it has, the node serves."""
    node = HostileRedis(port=0).start()
    seed = HostileRedis(port=0).start()
    try:
        slots = (b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n" + bulk(b"slowhost.test")
                 + b":%d\r\n" % node.port)
        node.cluster_slots = seed.cluster_slots = slots
        redis_key, inner = fx_key("announced")
        node.values[redis_key.encode()] = b"from the announced node"
        env = {"TORCHINDUCTOR_REDIS_URL": seed.url(),
               "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", **slow_dns}
        d = make_daemon(*redis_args(op_ms=OP_MS, connect_ms=CONNECT_MS, cluster="true"),
                        env=env)
        wait_for(lambda: d.stats()["tiers"]["remote"].get("slots_known") == 16384,
                 what="slot map loaded", timeout=10)
        client = Native(d.socket)
        status, _, took = _timed_get(client, inner)
        assert took < OP_MS / 1000 + MARGIN_S, took
        if status == MISS:
            assert "takes longer than the request may wait" in d.log()
        deadline = time.monotonic() + SLOW_S * 4 + 10
        while time.monotonic() < deadline:
            status, value, took = _timed_get(client, inner)
            assert took < OP_MS / 1000 + MARGIN_S, took
            if status == OK:
                break
            time.sleep(0.2)
        assert (status, value) == (OK, b"from the announced node"), d.log()[-2000:]
        assert d.proc.poll() is None
    finally:
        node.stop()
        seed.stop()
