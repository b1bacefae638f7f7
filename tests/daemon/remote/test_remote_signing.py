"""Signed remote entries (remote.signing_key_file, docs/remote.md) against a
real redis-server: a good signature, a tampered value, a missing signature, a
signature by another key, key rotation, the key file's permission check, and
interoperability with plain PyTorch (the value bytes are those of an unsigned
put). Signatures are recomputed here with Python's hmac from the spec."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess

import pytest
from pt2harness import wait_for
from remote_helpers import (MISS, OK, Native, fx_key, inductor_value, redis_args, redis_client,
                            redis_env, remote_stats, wait_remote_state)


def new_key() -> str:
    return os.urandom(32).hex()


def key_file(root, name: str, *keys: str, mode=0o600):
    path = root / name
    path.write_text("# pt2cache signing keys: the first signs, all verify\n" +
                    "".join(k + "\n" for k in keys))
    os.chmod(path, mode)
    return path


def spec_signature(secret_hex: str, redis_key: str, value: bytes) -> bytes:
    """docs/remote.md: v1:<key id>:<HMAC-SHA256 hex>."""
    secret = bytes.fromhex(secret_hex)
    key = redis_key.encode()
    key_id = hashlib.sha256(b"pt2cache-key-id-v1\0" + secret).hexdigest()[:8]
    mac = hmac.new(secret, b"pt2cache-sig-v1\0" + len(key).to_bytes(8, "big") + key + value,
                   hashlib.sha256).hexdigest()
    return f"v1:{key_id}:{mac}".encode()


def companion(redis_key: str) -> str:
    return "pt2sig:{" + redis_key + "}"


@pytest.fixture
def signed_daemon(make_daemon, redis_server, tmp_root):
    """make(name, *keys, sub=...) -> a daemon signing with a key file of `keys`."""
    def make(sub: str, *keys: str, **settings):
        path = key_file(tmp_root, f"{sub}.keys", *keys)
        d = make_daemon(*redis_args(signing_key_file=path, **settings),
                        env=redis_env(redis_server), sub=sub)
        wait_remote_state(d, "connected")
        return d
    return make


def put_through(d, r, seed: str, value: bytes | None = None):
    """A native put through `d`, waited for in Redis: (redis key, inner key, value)."""
    redis_key, inner = fx_key(seed)
    value = value if value is not None else inductor_value(20_000)
    assert Native(d.socket).put("fx-graph", inner, value) == OK
    wait_for(lambda: r.get(companion(redis_key)) is not None, what="the signed write")
    return redis_key, inner, value


def test_good_signature_and_plain_pytorch_interop(signed_daemon, remote_daemon, redis_server):
    k = new_key()
    writer = signed_daemon("writer", k, expire_s=3600)
    r = redis_client(redis_server)
    redis_key, inner, value = put_through(writer, r, "good")
    # The value is exactly what an unsigned put stores: plain PyTorch reads it.
    unsigned = remote_daemon(sub="unsigned")
    other_key, other_inner = fx_key("good-unsigned")
    assert Native(unsigned.socket).put("fx-graph", other_inner, value) == OK
    wait_for(lambda: r.get(other_key) is not None, what="the unsigned write")
    assert r.get(redis_key) == r.get(other_key) == value
    assert subprocess.run(["redis-cli", "-s", str(redis_server.socket), "GET", redis_key],
                          capture_output=True, check=True).stdout == value + b"\n"
    assert r.get(companion(redis_key)) == spec_signature(k, redis_key, value)
    assert r.get(companion(other_key)) is None
    # The companion expires with its value.
    assert 0 < r.ttl(companion(redis_key)) <= 3600 and 0 < r.ttl(redis_key) <= 3600

    reader = signed_daemon("reader", k)
    assert Native(reader.socket).get("fx-graph", inner) == (OK, value)
    stats = remote_stats(reader)
    assert (stats["hits"], stats["rejected_unsigned"], stats["rejected_bad_signature"]) == (1, 0, 0)
    assert reader.stats()["tiers"]["remote"]["signed"] is True
    # An unsigned daemon (and plain PyTorch) reads signed entries as they are.
    assert Native(unsigned.socket).get("fx-graph", inner) == (OK, value)
    # A delete removes the companion too.
    writer.cli("rm", "fx-graph", inner, check=True)
    wait_for(lambda: r.get(companion(redis_key)) is None and r.get(redis_key) is None,
             what="both keys deleted")


def assert_rejected(d, inner, counter, r, redis_key):
    """A counted miss, never served and never written to the local tiers."""
    assert Native(d.socket).get("fx-graph", inner) == (MISS, b"")
    stats = d.stats()
    assert stats["remote"][counter] == 1 and stats["remote"]["hits"] == 0
    assert stats["remote"]["backfills"] == 0
    # Not backfilled: with Redis emptied, the local tiers have nothing either.
    r.delete(redis_key, companion(redis_key))
    assert Native(d.socket).get("fx-graph", inner) == (MISS, b"")
    assert "rejected" in d.log()


def test_tampered_value_is_rejected(signed_daemon, redis_server):
    k = new_key()
    writer = signed_daemon("writer", k)
    r = redis_client(redis_server)
    redis_key, inner, value = put_through(writer, r, "tampered")
    r.set(redis_key, value.replace(b'"time_taken_ms": 1234', b'"time_taken_ms": 1235'))
    reader = signed_daemon("reader", k)
    assert_rejected(reader, inner, "rejected_bad_signature", r, redis_key)


def test_missing_signature_is_rejected(signed_daemon, redis_server):
    r = redis_client(redis_server)
    redis_key, inner = fx_key("unsigned")
    r.set(redis_key, inductor_value(1000))  # plain PyTorch wrote it: no companion
    reader = signed_daemon("reader", new_key())
    assert_rejected(reader, inner, "rejected_unsigned", r, redis_key)


def test_signature_by_another_key_is_rejected(signed_daemon, redis_server):
    r = redis_client(redis_server)
    writer = signed_daemon("writer", new_key())
    redis_key, inner, _ = put_through(writer, r, "foreign")
    reader = signed_daemon("reader", new_key())
    assert_rejected(reader, inner, "rejected_bad_signature", r, redis_key)


def test_a_forged_companion_is_rejected(signed_daemon, redis_server):
    """A writer without the key cannot make a signature: a well-formed one
    for another value, or garbage, both fail."""
    k = new_key()
    r = redis_client(redis_server)
    redis_key, inner = fx_key("forged")
    r.set(redis_key, b"evil pickle")
    r.set(companion(redis_key), spec_signature(k, redis_key, b"a benign value"))
    reader = signed_daemon("reader", k)
    assert_rejected(reader, inner, "rejected_bad_signature", r, redis_key)


def test_rotation(signed_daemon, redis_server):
    old, new = new_key(), new_key()
    r = redis_client(redis_server)
    old_writer = signed_daemon("old", old)
    old_key, old_inner, old_value = put_through(old_writer, r, "rotation-old")
    rotated = signed_daemon("rotated", new, old)
    # Entries signed with the old key still verify...
    assert Native(rotated.socket).get("fx-graph", old_inner) == (OK, old_value)
    # ...and new writes are signed with the first (new) key.
    fresh_key, new_inner, new_value = put_through(rotated, r, "rotation-new")
    assert r.get(companion(fresh_key)) == spec_signature(new, fresh_key, new_value)
    assert Native(signed_daemon("new-only", new).socket).get("fx-graph", new_inner) == \
        (OK, new_value)
    old_only = signed_daemon("old-only", old)
    assert Native(old_only.socket).get("fx-graph", new_inner) == (MISS, b"")
    assert remote_stats(old_only)["rejected_bad_signature"] == 1


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_key_file_others_can_read_stops_the_daemon(make_daemon, redis_server, tmp_root, mode):
    path = key_file(tmp_root, "keys", new_key(), mode=mode)
    with pytest.raises(RuntimeError, match=f"mode {mode:04o} lets others read or change it; "
                                           "make it 0600"):
        make_daemon(*redis_args(signing_key_file=path), env=redis_env(redis_server))


def test_key_file_without_keys_stops_the_daemon(make_daemon, redis_server, tmp_root):
    path = key_file(tmp_root, "keys", "not-a-key")
    with pytest.raises(RuntimeError, match="line 2: 9 characters"):
        make_daemon(*redis_args(signing_key_file=path), env=redis_env(redis_server))
