"""One torch.compile of issue 10's small MLP on the CPU, forward and backward:
Linear -> sin -> Linear -> gelu -> LayerNorm. Prints one JSON line:
{"compile_s": seconds, "counters": {group: {name: n}}, "routed": [...]}.

Used by tools/e2e-torch, tools/log-inductor-cxx and
tests/bench/kernel-cache-bench with the torch venv's interpreter. Everything
else (caches, remote caches, compiler) comes from the environment, except:

  PT2CACHE_E2E_NATIVE=1         route Inductor's remote caches through
                                pt2cache.torch.install() (native protocol)
  PT2CACHE_E2E_COMPILE_CACHE=1  also install(compile_cache=True): Inductor's
                                C++ builds go through pt2cache-cxx
"""

import json
import os
import sys
import time

import torch
import torch._dynamo.utils as dynamo_utils

routed = []
if os.environ.get("PT2CACHE_E2E_NATIVE") == "1" or os.environ.get(
        "PT2CACHE_E2E_COMPILE_CACHE") == "1":
    import pt2cache.torch

    if os.environ.get("PT2CACHE_E2E_NATIVE") == "1":
        routed = list(pt2cache.torch.install(
            compile_cache=os.environ.get("PT2CACHE_E2E_COMPILE_CACHE") == "1"))
    else:
        pt2cache.torch.install_compile_cache()
    print(f"torch-mlp: remote caches routed {routed}; cpp.cxx = "
          f"{torch._inductor.config.cpp.cxx!r}", file=sys.stderr)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 128)
        self.b = torch.nn.Linear(128, 64)
        self.norm = torch.nn.LayerNorm(64)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.b(torch.sin(self.a(x)))))


torch.manual_seed(0)
model = Model()
x = torch.randn(32, 64)
start = time.perf_counter()
compiled = torch.compile(model)
loss = compiled(x).sum()
loss.backward()  # forward and backward graphs: FX graph and AOTAutograd caches
elapsed = time.perf_counter() - start
expected = model(x).sum()
if not torch.allclose(loss, expected, rtol=1e-4, atol=1e-4):
    sys.exit(f"torch-mlp: compiled result {loss.item()} != eager {expected.item()}")
counters = {k: dict(v) for k, v in dynamo_utils.counters.items()
            if k in ("inductor", "aot_autograd")}
print(json.dumps({"compile_s": elapsed, "counters": counters, "routed": routed}))
