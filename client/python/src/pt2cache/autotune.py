"""Inductor's autotune best-configs, in pure Python, byte for byte.

Everything here mirrors ``torch/_inductor/runtime/autotune_cache.py`` and
``hash_configs`` in ``torch/_inductor/runtime/triton_heuristics.py``:

- :func:`prepare_key`: ``sha256_hex(f"{basename(filename)}:{cache_key_tag}")``
  (``AutotuneCache._prepare_key``), the inner key of every entry;
- :func:`local_key`: ``sha256_hex(prepared_key + torch_key) + ".best_config"``,
  the basename of Inductor's local ``.best_config`` file and the key of the
  local entry in namespace ``autotune`` (``_setup_local_cache``);
- :func:`remote_cache_id` / :func:`remote_key`: the per-kernel remote cache id
  ``sha256_hex(torch_key.hex() + backend_hash + configs_hash +
  "autotune-best-config-v2")`` and the remote-form key
  ``"{cache_id}::{prepared_key}"`` (``_setup_remote_autotune_cache``; Redis key
  ``pt2:{cache_id}::{prepared_key}:c1``);
- :func:`bundle_key`: ``sha256_hex(code_hash + backend_hash +
  "bundled-autotune-best-configs-v1")`` (``AutotuneCacheBundler.begin_compile``);
- :func:`hash_configs`, :func:`best_config` (the dict ``AutotuneCache.save``
  writes, in its field order), :func:`encode_best_config`
  (``RemoteCacheJsonSerde``) and :func:`load_cached_autotuning`
  (``_load_cached_autotuning``).

``torch_key`` is the bytes of ``torch._inductor.codecache.torch_key()`` (a
SHA-256 digest); a hex string is accepted too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "NAMESPACE",
    "BUNDLE_NAMESPACE",
    "REMOTE_SALT",
    "BUNDLE_SALT",
    "Config",
    "AutotuneKeys",
    "sha256_hex",
    "prepare_key",
    "local_key",
    "remote_cache_id",
    "remote_key",
    "bundle_key",
    "code_hash",
    "comment_stripped_hash",
    "hash_configs",
    "best_config",
    "encode_best_config",
    "decode_best_config",
    "load_cached_autotuning",
    "is_local_key",
    "bundle_entries",
]

NAMESPACE = "autotune"
BUNDLE_NAMESPACE = "autotune-bundle"
REMOTE_SALT = "autotune-best-config-v2"
BUNDLE_SALT = "bundled-autotune-best-configs-v1"
LOCAL_SUFFIX = ".best_config"

_LOCAL_KEY = re.compile(r"[0-9a-f]{64}\.best_config\Z")

TorchKey = Union[bytes, bytearray, memoryview, str]


class Config:
    """The parts of ``triton.Config`` that best-configs use.

    Any object with ``kwargs``, ``num_warps`` and ``num_stages`` attributes
    works wherever a config is expected; this class is what
    :func:`load_cached_autotuning` builds for a config found by coordinate
    descent.
    """

    def __init__(
        self,
        kwargs: Mapping[str, Any],
        num_warps: int = 4,
        num_stages: int = 2,
        num_consumer_groups: int = 0,
        num_buffers_warp_spec: int = 0,
    ):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_consumer_groups = num_consumer_groups
        self.num_buffers_warp_spec = num_buffers_warp_spec
        self.found_by_coordesc = False
        # A third-party backend's tuned options, stored beside the config.
        self.extra_options: Any = None

    def _fields(self) -> Tuple[Any, ...]:
        return (self.kwargs, self.num_warps, self.num_stages, self.num_consumer_groups,
                self.num_buffers_warp_spec, self.found_by_coordesc, self.extra_options)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        extra = ", found_by_coordesc=True" if self.found_by_coordesc else ""
        return (f"Config({self.kwargs!r}, num_warps={self.num_warps}, "
                f"num_stages={self.num_stages}{extra})")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _torch_key_bytes(torch_key: TorchKey) -> bytes:
    if isinstance(torch_key, str):
        return bytes.fromhex(torch_key)
    return bytes(torch_key)


def prepare_key(filename: str, cache_key_tag: str = "") -> str:
    """``AutotuneCache._prepare_key``: the inner key of a kernel's entries.
    ``filename`` is the kernel's generated ``.py`` (only its basename counts);
    ``cache_key_tag`` is ``torch.compiler.config.cache_key_tag``."""
    return sha256_hex(f"{os.path.basename(filename)}:{cache_key_tag}")


def local_key(prepared_key: str, torch_key: TorchKey) -> str:
    """``<64 hex>.best_config``: the basename of the local entry."""
    hasher = hashlib.sha256()
    hasher.update(prepared_key.encode("utf-8"))
    hasher.update(_torch_key_bytes(torch_key))
    return hasher.hexdigest() + LOCAL_SUFFIX


def remote_cache_id(torch_key: TorchKey, backend_hash: str, configs_hash: str) -> str:
    """The per-kernel ``cache_id`` of Inductor's RemoteAutotuneCache."""
    return sha256_hex(_torch_key_bytes(torch_key).hex() + backend_hash + configs_hash
                      + REMOTE_SALT)


def remote_key(prepared_key: str, torch_key: TorchKey, backend_hash: str,
               configs_hash: str) -> str:
    """``<remote cache id>::<prepared key>``: the key of the remote-form entry
    in namespace ``autotune`` (Redis: ``pt2:<this>:c1``)."""
    return f"{remote_cache_id(torch_key, backend_hash, configs_hash)}::{prepared_key}"


def bundle_key(code_hash: str, backend_hash: str) -> str:
    """The key of a module's bundle (namespace ``autotune-bundle``; Redis:
    ``pt2:bundled-autotune-v1::<this>:c1``)."""
    return sha256_hex(code_hash + backend_hash + BUNDLE_SALT)


def code_hash(code: Union[str, bytes], extra: Union[str, bytes] = "") -> str:
    """``torch._inductor.codecache.code_hash``."""
    data = code if isinstance(code, bytes) else code.encode("utf-8")
    if extra:
        extra_b = extra if isinstance(extra, bytes) else extra.encode("utf-8")
        data = data + b"||" + extra_b
    return "c" + base64.b32encode(hashlib.sha256(data).digest())[:51].decode("utf-8").lower()


def comment_stripped_hash(code: str) -> str:
    """``autotune_cache._comment_stripped_hash``: the ``code_hash`` that
    BUNDLE_BEGIN takes, of the module code with ``#`` comments removed."""
    return code_hash(re.sub(r"#.*$", "", code, count=0, flags=re.MULTILINE))


def hash_configs(configs: Sequence[Any]) -> str:
    """``triton_heuristics.hash_configs``: the ``configs_hash`` of a
    candidate list."""
    hasher = hashlib.sha256()
    for cfg in configs:
        hasher.update(
            f"{sorted(cfg.kwargs.items())} {cfg.num_warps} {cfg.num_stages}\n".encode("utf-8"))
    return hasher.hexdigest()


def is_local_key(key: str) -> bool:
    """Whether ``key`` is a local ``<64 hex>.best_config`` key (the form that
    bundles hold)."""
    return bool(_LOCAL_KEY.match(key))


def best_config(
    config: Any,
    configs_hash: str,
    time_taken_ns: int,
    *,
    found_by_coordesc: bool = False,
    triton_cache_hash: Optional[str] = None,
    has_warp_spec: bool = False,
) -> Dict[str, Any]:
    """The dict ``AutotuneCache.save`` stores, in its field order.
    ``has_warp_spec`` is Triton's ``HAS_WARP_SPEC``."""
    data: Dict[str, Any] = {
        **config.kwargs,
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "configs_hash": configs_hash,
        "found_by_coordesc": found_by_coordesc,
        "time_taken_ms": time_taken_ns // 1000000,
        "triton_cache_hash": triton_cache_hash,
    }
    extra_options = getattr(config, "extra_options", None)
    if extra_options:
        data["extra_options"] = extra_options
    if has_warp_spec:
        data.update({
            "num_consumer_groups": getattr(config, "num_consumer_groups", 0),
            "num_buffers_warp_spec": getattr(config, "num_buffers_warp_spec", 0),
        })
    return data


def encode_best_config(data: Mapping[str, Any]) -> bytes:
    """``RemoteCacheJsonSerde.encode``: ``bytes(json.dumps(data), "ascii")``."""
    return bytes(json.dumps(data), "ascii")


def decode_best_config(data: Optional[bytes]) -> Optional[Dict[str, Any]]:
    """The best-config dict in ``data``; None when absent, not JSON or not an
    object (Inductor ignores such entries)."""
    if not data:
        return None
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


def load_cached_autotuning(
    best_config: Optional[Mapping[str, Any]],
    configs_hash: str,
    configs: Sequence[Any],
    coordinate_descent_tuning: bool,
    *,
    has_warp_spec: bool = False,
) -> Optional[Any]:
    """``autotune_cache._load_cached_autotuning`` (torch 2.15), with
    ``inductor_meta["coordinate_descent_tuning"]`` passed as a flag:

    - no best-config, or its ``configs_hash`` differs: None;
    - unless coordinate-descent tuning is on and ``found_by_coordesc`` is
      set, the one candidate whose kwargs, ``num_warps`` and ``num_stages``
      all match, its ``extra_options`` set to the stored ones (as Inductor
      sets them on the candidate);
    - otherwise (no single candidate matches, or a coordesc entry with that
      tuning on) a new :class:`Config` from the stored values, with their
      ``extra_options``, and ``found_by_coordesc`` for the coordesc case.

    Unlike Inductor, ``best_config`` is not modified (a copy is used), and an
    entry without ``num_warps`` / ``num_stages`` that must be rebuilt is a
    miss rather than a KeyError.
    """
    if best_config is None:
        return None
    best = dict(best_config)
    if best.pop("configs_hash", None) != configs_hash:
        return None
    best.pop("time_taken_ms", None)
    best.pop("triton_cache_hash", None)
    extra_options = best.pop("extra_options", None)
    found_by_coordesc = bool(coordinate_descent_tuning and best.pop("found_by_coordesc", False))
    if not found_by_coordesc:
        matching = [
            cfg
            for cfg in configs
            if all(val == best.get(key) for key, val in cfg.kwargs.items())
            and cfg.num_warps == best.get("num_warps")
            and cfg.num_stages == best.get("num_stages")
        ]
        if len(matching) == 1:
            matching[0].extra_options = extra_options
            return matching[0]
    best.pop("found_by_coordesc", None)
    if "num_warps" not in best or "num_stages" not in best:
        return None
    num_warps = best.pop("num_warps")
    num_stages = best.pop("num_stages")
    warp_spec = {}
    if has_warp_spec:
        warp_spec = {
            "num_consumer_groups": best.pop("num_consumer_groups", 0),
            "num_buffers_warp_spec": best.pop("num_buffers_warp_spec", 0),
        }
    rebuilt = Config(best, num_warps=num_warps, num_stages=num_stages, **warp_spec)
    rebuilt.extra_options = extra_options
    rebuilt.found_by_coordesc = found_by_coordesc
    return rebuilt


@dataclass(frozen=True)
class AutotuneKeys:
    """The keys of one kernel's best-config in namespace ``autotune``, as
    ``AutotuneCache.create`` sets them up.

    ``local``: ``<hex>.best_config`` (None: no local entry, like
    ``autotune_local_cache=False``). ``remote``: ``<cache id>::<prepared key>``
    (None: no remote entry, like ``autotune_remote_cache`` off or no
    ``backend_hash``).
    """

    configs_hash: str
    local: Optional[str]
    remote: Optional[str]

    @classmethod
    def create(
        cls,
        filename: str,
        configs_hash: str,
        torch_key: TorchKey,
        backend_hash: Optional[str] = None,
        *,
        cache_key_tag: str = "",
        local: bool = True,
        remote: bool = True,
    ) -> "AutotuneKeys":
        prepared = prepare_key(filename, cache_key_tag)
        return cls(
            configs_hash=configs_hash,
            local=local_key(prepared, torch_key) if local else None,
            remote=(remote_key(prepared, torch_key, backend_hash, configs_hash)
                    if remote and backend_hash is not None else None),
        )

    @classmethod
    def for_configs(cls, filename: str, configs: Sequence[Any], torch_key: TorchKey,
                    backend_hash: Optional[str] = None, **kwargs: Any) -> "AutotuneKeys":
        """:meth:`create` with ``configs_hash = hash_configs(configs)``."""
        return cls.create(filename, hash_configs(configs), torch_key, backend_hash, **kwargs)


def bundle_entries(data: Optional[bytes]) -> Optional[Dict[str, Any]]:
    """The ``{basename: best_config}`` object of a bundle value, or None when
    it is absent or not a JSON object (``_AutotuneCacheBundlerImpl._load_cache``
    treats both as a miss)."""
    return decode_best_config(data)
