"""pt2cache.autotune against expectations computed here with hashlib, base64
and json directly (never through the package), and the typed best-config API
on Client against the real daemon."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

import pt2cache
import pt2cache.autotune as at
from pt2cache.keys import to_redis_key

TORCH_KEY = hashlib.sha256(b"pretend torch_key()").digest()
BACKEND = "d41d8cd98f00b204e9800998ecf8427e" * 2
KERNEL = "/tmp/torchinductor_me/xy/cxyzabc7kernelhash.py"


def sha(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- keys


@pytest.mark.parametrize("tag", ["", "my-tag"])
def test_prepare_key(tag):
    assert at.prepare_key(KERNEL, tag) == sha(f"cxyzabc7kernelhash.py:{tag}")
    assert at.prepare_key("cxyzabc7kernelhash.py", tag) == sha(f"cxyzabc7kernelhash.py:{tag}")


def test_local_key():
    inner = sha("cxyzabc7kernelhash.py:")
    expected = hashlib.sha256(inner.encode() + TORCH_KEY).hexdigest() + ".best_config"
    assert at.local_key(inner, TORCH_KEY) == expected
    assert at.local_key(inner, TORCH_KEY.hex()) == expected  # hex accepted too
    assert at.local_key(inner, bytearray(TORCH_KEY)) == expected
    assert at.is_local_key(expected)
    assert not at.is_local_key(expected.upper())
    assert not at.is_local_key("x" + expected)


def test_remote_key_and_its_redis_form():
    configs_hash = sha("some configs")
    inner = sha("cxyzabc7kernelhash.py:")
    cache_id = sha(TORCH_KEY.hex() + BACKEND + configs_hash + "autotune-best-config-v2")
    assert at.remote_cache_id(TORCH_KEY, BACKEND, configs_hash) == cache_id
    key = at.remote_key(inner, TORCH_KEY, BACKEND, configs_hash)
    assert key == f"{cache_id}::{inner}"
    redis_key = to_redis_key("autotune", key)
    assert redis_key == f"pt2:{cache_id}::{inner}:c1"
    assert len(redis_key) == 137


def test_bundle_key():
    code = at.code_hash("def kernel(): pass\n")
    assert at.bundle_key(code, BACKEND) == sha(code + BACKEND + "bundled-autotune-best-configs-v1")


def b32_code_hash(data: bytes) -> str:
    return "c" + base64.b32encode(hashlib.sha256(data).digest()).decode()[:51].lower()


def test_code_hash():
    assert at.code_hash("abc") == b32_code_hash(b"abc")
    assert at.code_hash(b"abc") == b32_code_hash(b"abc")
    assert at.code_hash("abc", "extra") == b32_code_hash(b"abc||extra")
    assert at.code_hash("abc", b"extra") == b32_code_hash(b"abc||extra")
    assert len(at.code_hash("abc")) == 52


def test_comment_stripped_hash():
    code = ("# kernel path: /tmp/run-1234/ab/cab.py\n"
            "import triton  # the compiler\n"
            "x = '#not a comment in Inductor either'\n")
    stripped = "\nimport triton  \nx = '\n"
    assert at.comment_stripped_hash(code) == b32_code_hash(stripped.encode())
    other_run = code.replace("run-1234", "run-9999")
    assert at.comment_stripped_hash(other_run) == at.comment_stripped_hash(code)


def test_hash_configs():
    configs = [at.Config({"XBLOCK": 64, "R0_BLOCK": 8}, num_warps=4, num_stages=2),
               at.Config({"XBLOCK": 128}, num_warps=8, num_stages=1),
               at.Config({}, num_warps=1, num_stages=1)]
    lines = ("[('R0_BLOCK', 8), ('XBLOCK', 64)] 4 2\n"
             "[('XBLOCK', 128)] 8 1\n"
             "[] 1 1\n")
    assert at.hash_configs(configs) == hashlib.sha256(lines.encode()).hexdigest()
    assert at.hash_configs([]) == hashlib.sha256(b"").hexdigest()
    # Key order does not matter, values do.
    reordered = [at.Config({"R0_BLOCK": 8, "XBLOCK": 64}, 4, 2)] + configs[1:]
    assert at.hash_configs(reordered) == at.hash_configs(configs)
    assert at.hash_configs([at.Config({"XBLOCK": 64, "R0_BLOCK": 8}, 4, 3)] + configs[1:]) != \
        at.hash_configs(configs)


# ---------------------------------------------------------------- best-config JSON


def test_best_config_fields_in_save_order():
    cfg = at.Config({"XBLOCK": 64, "R0_BLOCK": 8}, num_warps=4, num_stages=2)
    data = at.best_config(cfg, "h" * 64, 12_999_999, triton_cache_hash="t1")
    assert list(data) == ["XBLOCK", "R0_BLOCK", "num_warps", "num_stages", "configs_hash",
                          "found_by_coordesc", "time_taken_ms", "triton_cache_hash"]
    assert data["time_taken_ms"] == 12  # floor of ns / 1e6
    assert at.encode_best_config(data) == (
        b'{"XBLOCK": 64, "R0_BLOCK": 8, "num_warps": 4, "num_stages": 2, "configs_hash": "'
        + b"h" * 64 + b'", "found_by_coordesc": false, "time_taken_ms": 12, '
        b'"triton_cache_hash": "t1"}')
    none_hash = at.best_config(cfg, "h", 0, found_by_coordesc=True)
    assert none_hash["triton_cache_hash"] is None and none_hash["found_by_coordesc"] is True


def test_best_config_with_warp_spec():
    cfg = at.Config({"XBLOCK": 64}, 4, 2, num_consumer_groups=2, num_buffers_warp_spec=3)
    data = at.best_config(cfg, "h", 5_000_000, has_warp_spec=True)
    assert list(data)[-2:] == ["num_consumer_groups", "num_buffers_warp_spec"]
    assert (data["num_consumer_groups"], data["num_buffers_warp_spec"]) == (2, 3)

    class Bare:  # a triton.Config without warp-spec attributes
        kwargs = {"XBLOCK": 1}
        num_warps = 1
        num_stages = 1

    bare = at.best_config(Bare(), "h", 0, has_warp_spec=True)
    assert (bare["num_consumer_groups"], bare["num_buffers_warp_spec"]) == (0, 0)


def test_encode_is_ascii_json_dumps():
    data = {"K": "é", "n": 1.5}
    assert at.encode_best_config(data) == b'{"K": "\\u00e9", "n": 1.5}'
    assert at.decode_best_config(at.encode_best_config(data)) == data
    for bad in (None, b"", b"not json", b"[1, 2]", b"\xff\xfe", b"null", b"3"):
        assert at.decode_best_config(bad) is None


# ---------------------------------------------------------------- selection

A = at.Config({"XBLOCK": 64, "R0_BLOCK": 8}, num_warps=4, num_stages=2)
B = at.Config({"XBLOCK": 128, "R0_BLOCK": 8}, num_warps=4, num_stages=2)
C = at.Config({"XBLOCK": 64, "R0_BLOCK": 8}, num_warps=8, num_stages=2)
D = at.Config({"XBLOCK": 64, "R0_BLOCK": 8}, num_warps=4, num_stages=3)
A_TWIN = at.Config({"XBLOCK": 64, "R0_BLOCK": 8}, num_warps=4, num_stages=2)
A_SUBSET = at.Config({"XBLOCK": 64}, num_warps=4, num_stages=2)
A_EXTRA = at.Config({"XBLOCK": 64, "R0_BLOCK": 8, "YBLOCK": 2}, num_warps=4, num_stages=2)
H = "c0ffee" * 10 + "abcd"


def stored(kwargs=None, warps=4, stages=2, configs_hash=H, coordesc=False, **extra):
    data = {**(kwargs if kwargs is not None else {"XBLOCK": 64, "R0_BLOCK": 8}),
            "num_warps": warps, "num_stages": stages, "configs_hash": configs_hash,
            "found_by_coordesc": coordesc, "time_taken_ms": 7, "triton_cache_hash": "th"}
    data.update(extra)
    return data


def coordesc_config(kwargs, warps, stages, groups=0, buffers=0):
    c = rebuilt(kwargs, warps, stages, groups, buffers)
    c.found_by_coordesc = True
    return c


def with_extra(config, extra_options):
    config.extra_options = extra_options
    return config


def rebuilt(kwargs, warps, stages, groups=0, buffers=0):
    return at.Config(kwargs, num_warps=warps, num_stages=stages, num_consumer_groups=groups,
                     num_buffers_warp_spec=buffers)


# (id, best_config, configs, coordesc tuning, has_warp_spec, expected)
# expected: a candidate (returned as that very object), a Config built from the
# stored values, or None.
SELECTION = [
    ("no best config", None, [A, B], False, False, None),
    ("configs_hash differs", stored(configs_hash="other"), [A, B], False, False, None),
    ("configs_hash absent", {k: v for k, v in stored().items() if k != "configs_hash"},
     [A, B], False, False, None),
    ("exactly one match", stored(), [A, B], False, False, A),
    ("match is by kwargs", stored({"XBLOCK": 128, "R0_BLOCK": 8}), [A, B], False, False, B),
    ("no kwargs match: rebuilt", stored({"XBLOCK": 32, "R0_BLOCK": 8}), [A, B], False, False,
     rebuilt({"XBLOCK": 32, "R0_BLOCK": 8}, 4, 2)),
    ("num_warps differs: rebuilt", stored(warps=2), [A, B], False, False,
     rebuilt({"XBLOCK": 64, "R0_BLOCK": 8}, 2, 2)),
    ("num_warps selects", stored(warps=8), [A, C], False, False, C),
    ("num_stages differs: rebuilt", stored(stages=1), [A, B], False, False,
     rebuilt({"XBLOCK": 64, "R0_BLOCK": 8}, 4, 1)),
    ("num_stages selects", stored(stages=3), [A, D], False, False, D),
    ("two candidates match: rebuilt", stored(), [A, A_TWIN], False, False,
     rebuilt({"XBLOCK": 64, "R0_BLOCK": 8}, 4, 2)),
    ("empty candidate list: rebuilt", stored(), [], False, False,
     rebuilt({"XBLOCK": 64, "R0_BLOCK": 8}, 4, 2)),
    ("candidate kwargs a subset of the stored ones", stored(), [A_SUBSET, B], False, False,
     A_SUBSET),
    ("candidate has a kwarg the entry lacks: rebuilt", stored(), [A_EXTRA, B], False, False,
     rebuilt({"XBLOCK": 64, "R0_BLOCK": 8}, 4, 2)),
    ("coordesc entry, tuning off: matched like any", stored(coordesc=True), [A, B], False,
     False, A),
    ("coordesc entry, tuning off, not a candidate: rebuilt, not flagged",
     stored({"XBLOCK": 256}, coordesc=True), [A, B], False, False, rebuilt({"XBLOCK": 256}, 4, 2)),
    ("tuning on, entry not by coordesc: matched", stored(), [A, B], True, False, A),
    ("tuning on, entry not by coordesc, no match: rebuilt", stored({"XBLOCK": 256}), [A, B],
     True, False, rebuilt({"XBLOCK": 256}, 4, 2)),
    ("tuning on and coordesc entry: used as stored", stored({"XBLOCK": 256, "R0_BLOCK": 4},
                                                           warps=16, stages=5, coordesc=True),
     [A, B], True, False, coordesc_config({"XBLOCK": 256, "R0_BLOCK": 4}, 16, 5)),
    ("coordesc entry that is also a candidate: still a new config", stored(coordesc=True),
     [A, B], True, False, coordesc_config({"XBLOCK": 64, "R0_BLOCK": 8}, 4, 2)),
    ("coordesc with warp spec", stored({"XBLOCK": 256}, coordesc=True, num_consumer_groups=2,
                                       num_buffers_warp_spec=3), [A], True, True,
     coordesc_config({"XBLOCK": 256}, 4, 2, groups=2, buffers=3)),
    ("coordesc with warp spec, fields absent", stored({"XBLOCK": 256}, coordesc=True), [A],
     True, True, coordesc_config({"XBLOCK": 256}, 4, 2)),
    ("coordesc without warp spec keeps those fields as kwargs",
     stored({"XBLOCK": 256}, coordesc=True, num_consumer_groups=2, num_buffers_warp_spec=3),
     [A], True, False,
     coordesc_config({"XBLOCK": 256, "num_consumer_groups": 2, "num_buffers_warp_spec": 3}, 4, 2)),
    ("coordesc entry without num_warps: a miss, not a KeyError",
     {k: v for k, v in stored(coordesc=True).items() if k != "num_warps"}, [A], True, False,
     None),
    ("no match and no num_stages: a miss, not a KeyError",
     {k: v for k, v in stored({"XBLOCK": 256}).items() if k != "num_stages"}, [A], False, False,
     None),
    ("extra_options go with a rebuilt config, not into its kwargs",
     stored({"XBLOCK": 256}, coordesc=True, extra_options={"foo": 1}), [A], True, False,
     with_extra(coordesc_config({"XBLOCK": 256}, 4, 2), {"foo": 1})),
]


@pytest.mark.parametrize("best,configs,tuning,warp_spec,expected",
                         [row[1:] for row in SELECTION], ids=[row[0] for row in SELECTION])
def test_load_cached_autotuning(best, configs, tuning, warp_spec, expected):
    before = json.dumps(best)
    got = at.load_cached_autotuning(best, H, configs, tuning, has_warp_spec=warp_spec)
    assert json.dumps(best) == before, "the stored dict must not be modified"
    if expected is None:
        assert got is None
    elif any(expected is c for c in configs) and not expected.found_by_coordesc:
        assert got is expected
    else:
        assert isinstance(got, at.Config)
        assert not any(got is c for c in configs)
        assert got == expected  # found_by_coordesc and extra_options included


def test_extra_options_are_set_on_the_matching_candidate():
    """As Inductor does: the candidate itself gets the stored extra_options
    (None when the entry has none), and best_config() stores them."""
    a, b = (at.Config({"XBLOCK": x}, num_warps=4, num_stages=2) for x in (64, 128))
    a.extra_options = {"stale": True}
    got = at.load_cached_autotuning(stored({"XBLOCK": 64}, extra_options={"foo": 1}), H, [a, b],
                                    False)
    assert got is a and a.extra_options == {"foo": 1} and "extra_options" not in a.kwargs
    assert at.load_cached_autotuning(stored({"XBLOCK": 64}), H, [a, b], False) is a
    assert a.extra_options is None
    a.extra_options = {"foo": 1}
    saved = at.best_config(a, H, 0)
    assert saved["extra_options"] == {"foo": 1}
    assert "extra_options" not in at.best_config(b, H, 0)


# ---------------------------------------------------------------- typed API on Client


def candidates():
    return [at.Config({"XBLOCK": x, "R0_BLOCK": 8}, num_warps=4, num_stages=2)
            for x in (32, 64, 128)]


def test_keys_create():
    configs = candidates()
    h = at.hash_configs(configs)
    keys = at.AutotuneKeys.create(KERNEL, h, TORCH_KEY, BACKEND)
    inner = sha("cxyzabc7kernelhash.py:")
    assert keys.configs_hash == h
    assert keys.local == hashlib.sha256(inner.encode() + TORCH_KEY).hexdigest() + ".best_config"
    assert keys.remote == sha(TORCH_KEY.hex() + BACKEND + h + "autotune-best-config-v2") + \
        "::" + inner
    assert at.AutotuneKeys.for_configs(KERNEL, configs, TORCH_KEY, BACKEND) == keys
    assert at.AutotuneKeys.create(KERNEL, h, TORCH_KEY).remote is None  # no backend_hash
    assert at.AutotuneKeys.create(KERNEL, h, TORCH_KEY, BACKEND, remote=False).remote is None
    assert at.AutotuneKeys.create(KERNEL, h, TORCH_KEY, BACKEND, local=False).local is None
    tagged = at.AutotuneKeys.create(KERNEL, h, TORCH_KEY, BACKEND, cache_key_tag="t")
    assert tagged.local != keys.local and tagged.remote != keys.remote


def test_save_and_read_best_config(client):
    configs = candidates()
    keys = at.AutotuneKeys.for_configs(KERNEL, configs, TORCH_KEY, BACKEND)
    assert client.read_best_config(keys, configs) is None
    assert client.save_best_config(keys, configs[1], 42_000_001, triton_cache_hash="tch")
    expected = at.encode_best_config(at.best_config(configs[1], keys.configs_hash, 42_000_001,
                                                    triton_cache_hash="tch"))
    assert client.get("autotune", keys.local) == expected
    assert client.get("autotune", keys.remote) == expected
    assert json.loads(expected)["time_taken_ms"] == 42
    assert client.read_best_config(keys, configs) is configs[1]
    assert client.read_best_config_dict(keys) == json.loads(expected)
    # Another candidate list (another configs_hash): a miss.
    other = candidates()[:2]
    other_keys = at.AutotuneKeys.for_configs(KERNEL, other, TORCH_KEY, BACKEND)
    assert client.read_best_config(other_keys, other) is None
    # Local only, remote only: each finds it.
    assert client.read_best_config(
        at.AutotuneKeys(keys.configs_hash, keys.local, None), configs) is configs[1]
    assert client.read_best_config(
        at.AutotuneKeys(keys.configs_hash, None, keys.remote), configs) is configs[1]


def test_read_falls_back_to_the_remote_form(client):
    configs = candidates()
    keys = at.AutotuneKeys.for_configs(KERNEL, configs, TORCH_KEY, BACKEND)
    client.save_best_config(keys, configs[2], 1)
    client.delete("autotune", keys.local)
    assert client.read_best_config(keys, configs) is configs[2]
    # A local entry that is not a JSON object is skipped, as in Inductor.
    client.put("autotune", keys.local, b"[1, 2, 3]")
    assert client.read_best_config(keys, configs) is configs[2]
    client.put("autotune", keys.local, b"{corrupt")
    assert client.read_best_config(keys, configs) is configs[2]
    client.delete("autotune", keys.remote)
    assert client.read_best_config(keys, configs) is None


def test_local_entry_wins_over_remote(client):
    configs = candidates()
    keys = at.AutotuneKeys.for_configs(KERNEL, configs, TORCH_KEY, BACKEND)
    client.save_best_config(at.AutotuneKeys(keys.configs_hash, None, keys.remote), configs[0], 1)
    client.save_best_config(at.AutotuneKeys(keys.configs_hash, keys.local, None), configs[2], 1)
    assert client.read_best_config(keys, configs) is configs[2]


def test_coordesc_best_config_round_trip(client):
    configs = candidates()
    keys = at.AutotuneKeys.for_configs(KERNEL, configs, TORCH_KEY, BACKEND)
    tuned = at.Config({"XBLOCK": 512, "R0_BLOCK": 16}, num_warps=16, num_stages=1)
    client.save_best_config(keys, tuned, 3_000_000, found_by_coordesc=True)
    got = client.read_best_config(keys, configs, coordinate_descent_tuning=True)
    assert got.found_by_coordesc and got.kwargs == tuned.kwargs
    assert (got.num_warps, got.num_stages) == (16, 1)
    # That tuning off: rebuilt from the entry all the same, as Inductor 2.15
    # does for a config that is not among the candidates, but not flagged.
    plain = client.read_best_config(keys, configs, coordinate_descent_tuning=False)
    assert not plain.found_by_coordesc and plain.kwargs == tuned.kwargs
    assert (plain.num_warps, plain.num_stages) == (16, 1)


def test_typed_api_without_daemon(tmp_root):
    client = pt2cache.Client(tmp_root / "absent.sock")
    configs = candidates()
    keys = at.AutotuneKeys.for_configs(KERNEL, configs, TORCH_KEY, BACKEND)
    assert client.save_best_config(keys, configs[0], 1) is False
    assert client.read_best_config(keys, configs) is None
