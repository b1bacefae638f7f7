"""One torch.compile of two small transformer blocks on a CUDA GPU, forward
and backward, then one hand-written Triton kernel. Prints one JSON line:

  {"compile_s": s, "triton_first_call_s": s, "counters": {group: {name: n}},
   "routed": [...], "torch": version, "triton": version, "device": name}

Used by tools/e2e-gpu. The model's Inductor code is Triton kernels
(pointwise, and the reductions of LayerNorm and softmax, which Inductor
benchmarks among several configs the first time: the autotune cache's
entries). The hand-written kernel reaches Triton's cache manager directly,
as kernels compiled outside Inductor do. Caches, remote caches and Triton's
cache manager come from the environment, except:

  PT2CACHE_E2E_NATIVE=1   route Inductor's remote caches through
                          pt2cache.torch.install() (native protocol)

Exits non-zero when the compiled results differ from eager ones.
"""

import json
import os
import sys
import time

import torch
import torch._dynamo.utils as dynamo_utils
import triton
import triton.language as tl

routed = []
if os.environ.get("PT2CACHE_E2E_NATIVE") == "1":
    import pt2cache.torch

    routed = list(pt2cache.torch.install())
    print(f"torch-gpu: remote caches routed {routed}", file=sys.stderr)


class Block(torch.nn.Module):
    def __init__(self, width=256, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        attended = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, length, width)
        x = x + self.proj(attended)
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


@triton.jit
def scaled_add_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * alpha + y, mask=mask)


def check(what, got, want, tol):
    if not torch.allclose(got, want, rtol=tol, atol=tol):
        diff = (got - want).abs().max().item()
        sys.exit(f"torch-gpu: {what}: compiled differs from eager (max |diff| {diff})")


torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)
device = torch.device("cuda")
model = torch.nn.Sequential(Block(), Block()).to(device)
x = torch.randn(8, 128, 256, device=device)

torch.cuda.synchronize()
start = time.perf_counter()
compiled = torch.compile(model)
loss = compiled(x).square().mean()
loss.backward()  # forward and backward graphs: FX graph and AOTAutograd caches
torch.cuda.synchronize()
compile_s = time.perf_counter() - start
grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
expected = model(x).square().mean()
expected.backward()
check("loss", loss.detach(), expected.detach(), 1e-4)
for got, param in zip(grads, model.parameters()):
    check("gradient", got, param.grad, 1e-3)

a = torch.randn(1 << 20, device=device)
b = torch.randn(1 << 20, device=device)
out = torch.empty_like(a)
start = time.perf_counter()
scaled_add_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), 0.5, BLOCK=1024)
torch.cuda.synchronize()
triton_first_call_s = time.perf_counter() - start
check("hand-written Triton kernel", out, a * 0.5 + b, 1e-6)

counters = {k: dict(v) for k, v in dynamo_utils.counters.items()
            if k in ("inductor", "aot_autograd")}
print(json.dumps({
    "compile_s": compile_s, "triton_first_call_s": triton_first_call_s,
    "counters": counters, "routed": routed, "torch": torch.__version__,
    "triton": triton.__version__, "device": torch.cuda.get_device_name(),
}))
