#!/usr/bin/env python3
"""Peer side of `cargo xtask bench --peers`: PyTorch and numpy kernels, timed
one at a time on request so the xtask can interleave them with ours.

Protocol (stdin/stdout, one line each): a kernel name in, the milliseconds
it took out; `quit` stops. Kernels:

- `adam1` / `adam2`: one `torch.optim.Adam(fused=True)` step on 64 Mi f32
  parameters with a fixed gradient, `torch.set_num_threads(1)` / `(2)`;
- `adam1_chk`: `adam1` preceded by `torch.isfinite(grad).all()` read back
  as a Python bool (what a GradScaler-style check of the gradient costs
  torch before its step; the step runs only when it is true), 1 thread.
  `torch.isfinite` is a composite (an `abs` into a new float tensor and two
  bool tensors), so this is the naive user's check;
- `adam1_amp`: `adam1` preceded by GradScaler's own fused check,
  `torch._amp_foreach_non_finite_check_and_unscale_` with scale 1 (reads
  the gradient and writes it back unscaled, sets `found_inf`), the step
  only when nothing was found, 1 thread;
- `packbits`: `numpy.packbits(~(x < 0))` on 64 Mi f32 (our sign order).

N can be set with the PEERS_N environment variable (default 64 Mi).
"""
import os
import sys
import time

import numpy as np
import torch

n = int(os.environ.get("PEERS_N", 64 << 20))
gen = torch.Generator().manual_seed(7)
param = torch.nn.Parameter(torch.rand(n, generator=gen) - 0.5)
param.grad = torch.rand(n, generator=gen) - 0.5
opt = torch.optim.Adam([param], lr=1e-3, fused=True)
found_inf = torch.zeros(1)
inv_scale = torch.ones(1)
x = np.random.default_rng(1).random(n, dtype=np.float32) - np.float32(0.5)
sys.stderr.write(f"peer: torch {torch.__version__}, numpy {np.__version__}, n = {n}\n")

for line in sys.stdin:
    kernel = line.strip()
    if kernel == "quit":
        break
    if kernel in ("adam1", "adam2"):
        torch.set_num_threads(1 if kernel == "adam1" else 2)
        t = time.perf_counter()
        opt.step()
        ms = (time.perf_counter() - t) * 1e3
    elif kernel == "adam1_amp":
        torch.set_num_threads(1)
        t = time.perf_counter()
        found_inf.zero_()
        torch._amp_foreach_non_finite_check_and_unscale_([param.grad], found_inf, inv_scale)
        if found_inf.item() == 0.0:
            opt.step()
        ms = (time.perf_counter() - t) * 1e3
    elif kernel == "adam1_chk":
        torch.set_num_threads(1)
        t = time.perf_counter()
        if bool(torch.isfinite(param.grad).all()):
            opt.step()
        ms = (time.perf_counter() - t) * 1e3
    elif kernel == "packbits":
        t = time.perf_counter()
        np.packbits(~(x < 0))
        ms = (time.perf_counter() - t) * 1e3
    else:
        sys.stderr.write(f"unknown kernel {kernel}\n")
        sys.exit(2)
    print(f"{ms:.3f}", flush=True)
