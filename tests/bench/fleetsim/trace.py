"""The Inductor-like trace that tests/bench/fleet-sim replays.

One model = ``graphs`` compiled graphs. Each graph has, as plain PyTorch names
them in Redis (docs/torch.md, proto::to_redis_key):

- one AOTAutograd entry  ``pt2:autograd-experimental::a<51 base32>:c1``
- one FX-graph entry     ``pt2:fx-graph-v1::f<51 base32>:c1`` (a few are MBs)
- its kernels' best configs, one per kernel: ``pt2:<64 hex>::<64 hex>:c1``
  (~290-350 B of best_config JSON).

Values are deterministic functions of the key, so every worker that
"compiles" an entry produces the same bytes, and every hit is checked byte for
byte (a wrong value is counted as an error: a false hit).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Entry:
    redis_key: str
    size: int  # bytes of the value

    def value(self) -> bytes:
        return make_value(self.redis_key, self.size)


@dataclass
class Graph:
    aot: Entry
    fx: Entry
    kernels: list[Entry] = field(default_factory=list)

    def entries(self) -> list[Entry]:
        return [self.aot, self.fx, *self.kernels]


def _b32(seed: str) -> str:
    return base64.b32encode(hashlib.sha256(seed.encode()).digest()).decode().lower()[:51]


def _hex(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def make_value(redis_key: str, size: int) -> bytes:
    """``size`` bytes derived from the key. Small values look like a
    best_config; large ones like RemoteCacheJsonSerde's base64 JSON."""
    digest = hashlib.sha256(redis_key.encode()).hexdigest()
    if size < 1024:
        config = {"XBLOCK": 64, "R0_BLOCK": 8, "num_warps": 4, "num_stages": 1,
                  "configs_hash": digest, "found_by_coordesc": False, "time_taken_ms": 12,
                  "triton_cache_hash": digest[::-1]}
        text = json.dumps(config)
        return (text + " " * max(0, size - len(text))).encode()[:max(size, len(text))]
    head = b'{"data": "'
    tail = b'", "time_taken_ms": 4321}'
    body_len = max(0, size - len(head) - len(tail))
    block = base64.b64encode(hashlib.sha512(redis_key.encode()).digest() * 24)
    body = (block * (body_len // len(block) + 1))[:body_len]
    return head + body + tail


# FX-graph entry sizes of the default model: a few MB-sized graphs, the rest
# hundreds of KiB (Inductor bundles kernel sources and cubins into them).
_FX_SIZES_MB = (4.0, 2.0, 1.0, 0.5, 0.25, 0.25, 0.25, 0.25)


def build(graphs: int = 8, kernels: int = 2000, aot_size: int = 48 << 10,
          fx_scale: float = 1.0, seed: str = "model-0") -> list[Graph]:
    """The model: ``graphs`` graphs sharing ``kernels`` autotune keys."""
    out = []
    per_graph = [kernels // graphs + (1 if i < kernels % graphs else 0) for i in range(graphs)]
    for g in range(graphs):
        fx_size = int(_FX_SIZES_MB[g % len(_FX_SIZES_MB)] * fx_scale * (1 << 20))
        graph = Graph(
            aot=Entry(f"pt2:autograd-experimental::a{_b32(f'{seed}/aot/{g}')}:c1", aot_size),
            fx=Entry(f"pt2:fx-graph-v1::f{_b32(f'{seed}/fx/{g}')}:c1", max(fx_size, 2048)))
        cache_id = _hex(f"{seed}/torch_key+backend_hash+configs/{g}")
        for k in range(per_graph[g]):
            key = f"pt2:{cache_id}::{_hex(f'{seed}/kernel/{g}/{k}')}:c1"
            graph.kernels.append(Entry(key, 290 + (k * 37) % 60))
        out.append(graph)
    return out


def summary(model: list[Graph]) -> dict:
    entries = [e for g in model for e in g.entries()]
    return {"graphs": len(model), "keys": len(entries),
            "autotune_keys": sum(len(g.kernels) for g in model),
            "bytes": sum(e.size for e in entries),
            "fx_bytes": sum(g.fx.size for g in model)}
