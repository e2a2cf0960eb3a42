#!/usr/bin/env python3
"""Peer timing for the codec bench: numpy.packbits(~(x < 0)) on the bench's data.

usage: numpy_packbits.py INPUT.f32 OUTPUT.bits   (raw little-endian f32 in, packed bytes out)
Prints the median of 10 runs and GB/s of f32 input. Exits 1 with a message when
numpy is missing (the bench then reports the peer as skipped).
"""
import sys
import time

try:
    import numpy as np
except ImportError:
    sys.stderr.write("numpy is not installed\n")
    sys.exit(1)

x = np.fromfile(sys.argv[1], dtype="<f4")
times = []
for _ in range(10):
    t = time.perf_counter()
    packed = np.packbits(~(x < 0))
    times.append(time.perf_counter() - t)
packed.tofile(sys.argv[2])
times.sort()
median = (times[4] + times[5]) / 2
print(f"numpy {np.__version__} packbits(~(x<0)) n={x.size}: median {median * 1e3:.2f} ms, "
      f"{x.nbytes / median / 1e9:.2f} GB/s of f32 input (min {times[0] * 1e3:.2f} ms) median_s={median}")
