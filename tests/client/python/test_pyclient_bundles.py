"""Autotune bundles through pt2cache.Client: BUNDLE_BEGIN / gets and puts with
the token / BUNDLE_END (docs/protocol.md, Bundles), shared by worker
processes, restored by a fresh daemon from a real redis-server, and
interoperating with Inductor's own bundle format in Redis."""

from __future__ import annotations

import json
import multiprocessing
import time

import pytest

import pt2cache
import pt2cache.autotune as at
from pt2cache import UnknownTokenError
from pt2harness import wait_for
from pyclient_helpers import (bundle_ops_available, inductor_best_config, inductor_bundle_redis_key,
                              inductor_load_bundle, inductor_local_basename, redis_get, redis_keys,
                              redis_set)
from pyclient_workers import kernel_filename, save_kernel_to_queue

TORCH_KEY = bytes.fromhex("5a" * 32)
BACKEND = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
MODULE_CODE = """# AOT ID: ['0_inference']
# kernel path: /tmp/torchinductor_me/ab/cabc.py
def call(args):
    buf0 = empty_strided_cuda((64, ), (1, ), torch.float32)  # topologically sorted
    triton_poi_fused_add_0.run(args[0], buf0, 64)
    return (buf0, )
"""


def code_hash(variant: str = "") -> str:
    return at.comment_stripped_hash(MODULE_CODE + variant)


def kernel(i: int, bundle_token=None, client=None, time_ms=None):
    """Saves kernel i's best-config; returns (local key, stored bytes)."""
    candidates = [at.Config({"XBLOCK": 2 ** (i % 8), "R0_BLOCK": 4}, 4, 2),
                  at.Config({"XBLOCK": 1024, "R0_BLOCK": 4}, 8, 2)]
    keys = at.AutotuneKeys.for_configs(f"/tmp/k/ab/ck{i:03d}.py", candidates, TORCH_KEY, BACKEND)
    ns = (time_ms if time_ms is not None else 10 + i) * 1_000_000 + 123
    data = at.encode_best_config(at.best_config(candidates[0], keys.configs_hash, ns))
    if client is not None:
        assert client.save_best_config(keys, candidates[0], ns, bundle_token=bundle_token)
    return keys.local, data


def local_hits(stats: dict, ns: str = "autotune") -> tuple:
    tiers = stats["namespaces"].get(ns, {})

    def get(tier, field):
        return (tiers.get(tier) or {}).get(field, 0)

    return get("memory", "hits") + get("disk", "hits"), get("remote", "hits"), \
        get("remote", "misses")


# ---------------------------------------------------------------- one daemon


def test_begin_put_end_then_hit(client, needs_bundles):
    begin = client.bundle_begin(code_hash(), BACKEND)
    assert begin.ok and not begin.hit
    assert (begin.entries, begin.time_saved_ms) == (0, 0)
    saved = dict(kernel(i, begin.token, client) for i in range(5))
    # Served, but not bundled: other namespaces and remote-form autotune keys
    # (save_best_config wrote those too).
    assert client.put("pgo", "unrelated", b"v", bundle_token=begin.token)
    assert client.get("pgo", "unrelated", bundle_token=begin.token) == b"v"
    assert client.bundle_end(begin.token) == 5

    # Stored as Inductor's JSON, entries in the order they joined.
    raw = client.get("autotune-bundle", at.bundle_key(code_hash(), BACKEND))
    expected = {key: json.loads(value) for key, value in saved.items()}
    assert raw == bytes(json.dumps(expected), "ascii")

    with pytest.raises(UnknownTokenError):
        client.bundle_end(begin.token)  # already ended
    assert client.connected  # UNKNOWN_TOKEN keeps the connection

    # Local per-kernel entries gone: a hit restores every one of them.
    assert client.clear("autotune") >= 5
    again = client.bundle_begin(code_hash(), BACKEND)
    assert again.ok and again.hit
    assert again.entries == 5
    assert again.time_saved_ms == sum(10 + i for i in range(5))
    for key, value in saved.items():
        assert client.get("autotune", key) == value
    assert client.bundle_end(again.token) == 0  # the bundle exists: not stored again


def test_hits_with_the_token_join_the_bundle(client, needs_bundles):
    old_key, old_value = kernel(0, client=client)  # compiled by another model earlier
    begin = client.bundle_begin(code_hash("other model"), BACKEND)
    assert not begin.hit
    assert client.get("autotune", old_key, bundle_token=begin.token) == old_value
    missing_key, _ = kernel(1)
    assert client.get("autotune", missing_key, bundle_token=begin.token) is None
    new_key, new_value = kernel(2, begin.token, client)
    assert client.bundle_end(begin.token) == 2
    raw = client.get("autotune-bundle", at.bundle_key(code_hash("other model"), BACKEND))
    assert list(json.loads(raw)) == [old_key, new_key]
    assert json.loads(raw)[new_key] == json.loads(new_value)


def test_typed_read_with_the_token_joins_the_bundle(client, needs_bundles):
    candidates = [at.Config({"XBLOCK": 8}, 4, 2), at.Config({"XBLOCK": 16}, 4, 2)]
    keys = at.AutotuneKeys.for_configs(kernel_filename(3), candidates, TORCH_KEY, BACKEND)
    client.save_best_config(keys, candidates[1], 5_000_000)
    begin = client.bundle_begin(code_hash("typed"), BACKEND)
    assert client.read_best_config(keys, candidates, bundle_token=begin.token) is candidates[1]
    assert client.bundle_end(begin.token) == 1


def test_empty_bundle_is_not_stored(client, needs_bundles):
    begin = client.bundle_begin(code_hash("empty"), BACKEND)
    assert client.bundle_end(begin.token) == 0
    assert client.get("autotune-bundle", at.bundle_key(code_hash("empty"), BACKEND)) is None
    assert not client.bundle_begin(code_hash("empty"), BACKEND).hit


def test_token_works_from_other_connections(daemon, needs_bundles):
    a = pt2cache.Client(daemon.socket, strict=True)
    b = pt2cache.Client(daemon.socket, strict=True)
    begin = a.bundle_begin(code_hash("shared"), BACKEND)
    kernel(0, begin.token, a)
    kernel(1, begin.token, b)
    assert b.bundle_end(begin.token) == 2
    with pytest.raises(UnknownTokenError):
        a.bundle_end(begin.token)


def test_unknown_token(client, lenient, needs_bundles):
    client.put("autotune", "a" * 64 + ".best_config", b"{}")
    with pytest.raises(UnknownTokenError) as info:
        client.bundle_end(0xDEADBEEF)
    assert info.value.status_name == "UNKNOWN_TOKEN"
    with pytest.raises(UnknownTokenError):
        client.get("autotune", "a" * 64 + ".best_config", bundle_token=0xDEADBEEF)
    with pytest.raises(UnknownTokenError):
        client.put("autotune", "b" * 64 + ".best_config", b"{}", bundle_token=0xDEADBEEF)
    assert client.connected
    # Lenient: the operation happens without the token.
    assert lenient.bundle_end(0xDEADBEEF) == 0
    assert lenient.get("autotune", "a" * 64 + ".best_config", bundle_token=0xDEADBEEF) == b"{}"
    assert lenient.put("autotune", "c" * 64 + ".best_config", b"{}", bundle_token=0xDEADBEEF)
    assert client.get("autotune", "c" * 64 + ".best_config") == b"{}"


def test_expired_token(make_daemon):
    d = make_daemon("--set", "bundle.idle_timeout_s=1", sub="expiry")
    if not bundle_ops_available(d.socket):
        pytest.skip("pt2cached answers BUNDLE_BEGIN with UNKNOWN_OP: bundles have not landed")
    client = pt2cache.Client(d.socket, strict=True)
    kept = client.bundle_begin(code_hash("kept"), BACKEND)
    idle = client.bundle_begin(code_hash("idle"), BACKEND)
    for i in range(5):  # use keeps `kept` alive well past the timeout
        time.sleep(0.5)
        kernel(i, kept.token, client)
    assert client.bundle_end(kept.token) == 5
    # `idle` has not been used for 2.5 s.
    with pytest.raises(UnknownTokenError):
        kernel(9, idle.token, client)
    with pytest.raises(UnknownTokenError):
        client.bundle_end(idle.token)
    assert client.connected


# ---------------------------------------------------------------- Redis, many processes


def test_eight_processes_one_bundle_restored_by_a_fresh_daemon(make_daemon, redis_server,
                                                               remote_env, needs_remote):
    first = make_daemon(env=remote_env, sub="first")
    if not bundle_ops_available(first.socket):
        pytest.skip("pt2cached answers BUNDLE_BEGIN with UNKNOWN_OP: bundles have not landed")
    coordinator = pt2cache.Client(first.socket, strict=True)
    module = code_hash("eight workers")
    begin = coordinator.bundle_begin(module, BACKEND)
    assert begin.ok and not begin.hit

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    workers = [ctx.Process(target=save_kernel_to_queue,
                           args=((str(first.socket), begin.token, i, TORCH_KEY, BACKEND), queue))
               for i in range(8)]
    for w in workers:
        w.start()
    results = [queue.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(30)
        assert w.exitcode == 0
    failures = [r for r in results if isinstance(r, str)]
    assert not failures, failures
    assert len({local for local, _, _ in results}) == 8
    assert len({pid for _, _, pid in results}) == 8  # eight processes, eight connections
    assert coordinator.bundle_end(begin.token) == 8

    redis_key = inductor_bundle_redis_key(module, BACKEND)
    wait_for(lambda: redis_get(redis_server.socket, redis_key) is not None, timeout=10,
             what="the bundle in Redis")
    stored = json.loads(redis_get(redis_server.socket, redis_key))
    assert stored == {local: json.loads(data) for local, data, _ in results}

    second = make_daemon(env=remote_env, sub="second")  # its own, empty cache dir
    assert second.cache_dir != first.cache_dir
    second.wait_remote()  # else the bundle may be missed, not read
    fresh = pt2cache.Client(second.socket, strict=True)
    hit = fresh.bundle_begin(module, BACKEND)
    assert hit.ok and hit.hit
    assert hit.entries == 8
    assert hit.time_saved_ms == sum(100 + i for i in range(8))
    before = local_hits(fresh.stats())
    for local, data, _ in results:
        assert fresh.get("autotune", local) == data
    after = local_hits(fresh.stats())
    assert after[0] - before[0] == 8, (before, after)  # memory or disk hits
    assert after[1] == before[1] == 0  # no remote hit for those gets
    assert after[2] == before[2]  # nor a remote lookup
    assert fresh.bundle_end(hit.token) == 0


def test_pt2cached_bundle_restored_by_inductor_loader(make_daemon, redis_server, remote_env,
                                                     needs_remote, tmp_root):
    d = make_daemon(env=remote_env, sub="writer")
    if not bundle_ops_available(d.socket):
        pytest.skip("pt2cached answers BUNDLE_BEGIN with UNKNOWN_OP: bundles have not landed")
    client = pt2cache.Client(d.socket, strict=True)
    module = code_hash("to inductor")
    begin = client.bundle_begin(module, BACKEND)
    saved = dict(kernel(i, begin.token, client) for i in range(3))
    assert client.bundle_end(begin.token) == 3

    redis_key = inductor_bundle_redis_key(module, BACKEND)
    wait_for(lambda: redis_get(redis_server.socket, redis_key) is not None, timeout=10,
             what="the bundle in Redis")
    raw = redis_get(redis_server.socket, redis_key)
    # Byte for byte what Inductor's RemoteCacheJsonSerde would have written.
    assert raw == bytes(json.dumps({k: json.loads(v) for k, v in saved.items()}), "ascii")

    cache_dir = tmp_root / "torchinductor"
    written = inductor_load_bundle(raw, cache_dir)
    assert set(written) == set(saved)
    for basename, path in written.items():
        assert path == cache_dir / basename[1:3] / basename
        assert path.read_bytes() == saved[basename]


def test_inductor_bundle_restored_by_pt2cached(make_daemon, redis_server, remote_env,
                                              needs_remote):
    module = code_hash("from inductor")
    configs_hash = "9" * 64
    entries = {}
    for i in range(3):
        basename = inductor_local_basename(f"/tmp/i/ab/cik{i}.py", TORCH_KEY)
        entries[basename] = inductor_best_config({"XBLOCK": 64 * (i + 1), "R0_BLOCK": 2}, 4, 2,
                                                 configs_hash, time_taken_ms=20 + i,
                                                 triton_cache_hash=f"th{i}")
    # Not a best-config basename: Inductor would write it somewhere, pt2cached
    # does not restore it into namespace autotune.
    entries["something.else"] = {"x": 1}
    redis_set(redis_server.socket, inductor_bundle_redis_key(module, BACKEND),
              bytes(json.dumps(entries), "ascii"))

    d = make_daemon(env=remote_env, sub="reader")
    if not bundle_ops_available(d.socket):
        pytest.skip("pt2cached answers BUNDLE_BEGIN with UNKNOWN_OP: bundles have not landed")
    d.wait_remote()  # else the bundle may be missed, not read
    client = pt2cache.Client(d.socket, strict=True)
    hit = client.bundle_begin(module, BACKEND)
    assert hit.hit and hit.entries == 3
    assert hit.time_saved_ms == 20 + 21 + 22
    for basename, data in entries.items():
        if basename.endswith(".best_config"):
            assert client.get("autotune", basename) == bytes(json.dumps(data), "ascii")
    assert client.get("autotune", "something.else") is None
    assert client.bundle_end(hit.token) == 0
    # Per-kernel reads of those entries are local hits.
    keys = at.AutotuneKeys.create("/tmp/i/ab/cik1.py", configs_hash, TORCH_KEY, None)
    assert keys.local in entries
    got = client.read_best_config(keys, [at.Config({"XBLOCK": 128, "R0_BLOCK": 2}, 4, 2)])
    assert got is not None and got.kwargs == {"XBLOCK": 128, "R0_BLOCK": 2}


@pytest.mark.parametrize("garbage", [b"{not json", b"[1, 2, 3]", b"\xff\xfe", b"null"])
def test_malformed_bundle_in_redis_is_a_counted_miss(make_daemon, redis_server, remote_env,
                                                    needs_remote, garbage):
    module = code_hash("garbage")
    redis_set(redis_server.socket, inductor_bundle_redis_key(module, BACKEND), garbage)
    d = make_daemon(env=remote_env, sub="garbage")
    if not bundle_ops_available(d.socket):
        pytest.skip("pt2cached answers BUNDLE_BEGIN with UNKNOWN_OP: bundles have not landed")
    d.wait_remote()  # else the bundle may be missed, not read
    client = pt2cache.Client(d.socket, strict=True)
    begin = client.bundle_begin(module, BACKEND)  # no exception, strict as it is
    assert begin.ok and not begin.hit and begin.entries == 0
    bundle_stats = client.stats()["namespaces"].get("autotune-bundle", {})
    assert sum(t.get("corrupt", 0) for t in bundle_stats.values() if t) >= 1, bundle_stats
    assert d.proc.poll() is None
    # A good bundle replaces it.
    saved = dict(kernel(i, begin.token, client) for i in range(2))
    assert client.bundle_end(begin.token) == 2
    redis_key = inductor_bundle_redis_key(module, BACKEND)
    wait_for(lambda: redis_get(redis_server.socket, redis_key) != garbage, timeout=10,
             what="the bundle replaced in Redis")
    assert json.loads(redis_get(redis_server.socket, redis_key)) == \
        {k: json.loads(v) for k, v in saved.items()}


def test_local_best_config_keys_never_reach_redis(make_daemon, redis_server, remote_env,
                                                  needs_remote):
    d = make_daemon(env=remote_env, sub="local-only")
    client = pt2cache.Client(d.socket, strict=True)
    candidates = [at.Config({"XBLOCK": 8}, 4, 2), at.Config({"XBLOCK": 16}, 4, 2)]
    keys = at.AutotuneKeys.for_configs(kernel_filename(5), candidates, TORCH_KEY, BACKEND)
    client.save_best_config(keys, candidates[0], 1_000_000)
    remote = f"pt2:{keys.remote}:c1"
    wait_for(lambda: redis_get(redis_server.socket, remote) is not None, timeout=10,
             what="the remote-form entry in Redis")
    assert redis_get(redis_server.socket, remote) == client.get("autotune", keys.local)
    assert not any(keys.local in k for k in redis_keys(redis_server.socket))
