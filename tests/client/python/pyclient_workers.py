"""Worker functions run in multiprocessing 'spawn' children: only the standard
library and pt2cache are imported, so a child starts fast."""

from __future__ import annotations

import os
from typing import Tuple


def kernel_config(index: int):
    import pt2cache.autotune as at

    return at.Config({"XBLOCK": 16 << (index % 6), "R0_BLOCK": 8 * (index + 1)},
                     num_warps=2 ** (index % 4), num_stages=1 + index % 3)


def kernel_filename(index: int) -> str:
    return f"/tmp/torchinductor_test/ab/cabc{index:03d}kernel.py"


def save_kernel(args) -> Tuple[str, bytes, int]:
    """Saves kernel `index`'s best-config under bundle `token` from a fresh
    process (its own Client, its own connection); returns (local key, stored
    JSON bytes, pid)."""
    socket_path, token, index, torch_key, backend_hash = args
    import pt2cache
    import pt2cache.autotune as at

    candidates = [kernel_config(index), kernel_config(index + 1)]
    configs_hash = at.hash_configs(candidates)
    keys = at.AutotuneKeys.create(kernel_filename(index), configs_hash, torch_key, backend_hash)
    client = pt2cache.Client(socket_path, strict=True)
    time_taken_ns = (100 + index) * 1_000_000 + 999_999
    ok = client.save_best_config(keys, candidates[0], time_taken_ns, bundle_token=token,
                                 triton_cache_hash=f"triton-{index}")
    assert ok
    data = at.encode_best_config(at.best_config(candidates[0], configs_hash, time_taken_ns,
                                                triton_cache_hash=f"triton-{index}"))
    client.close()
    return keys.local, data, os.getpid()


def save_kernel_to_queue(args, queue) -> None:
    """save_kernel, its result (or the error, as a string) put on `queue`."""
    try:
        queue.put(save_kernel(args))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        import traceback

        queue.put(f"worker {args[2]}: {e!r}\n{traceback.format_exc()}")
