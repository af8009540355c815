#!/usr/bin/env python3
"""Fits the simulator's achieved-efficiency constants (simulation.gpu_efficiency: achieved,
runtime/sim/gpu_kinds.cc) to a kernel table that bench/gpu_models.py measured on a GPU, and prints
them with each row's fit error.

Calibration uses the kernel table only (gpu_kernels.csv); the whole-model steps
(gpu_models.csv) are never fitted to: they are the validation rows (bench/gpu_predict.py).

The model, for one op on one GPU at one precision:
  matrix multiplies and convolutions:  max(FLOP / (peak x fraction x shape), bytes / (bandwidth x
                                       memory fraction)) + fixed
  memory-bound ops (add, relu, copy):  bytes / (bandwidth x memory fraction) + memory fixed
and no op shorter than the host's issue time (a one-element add issued back to back). `shape` is
what a GEMM of m x n (inner k) loses to its tiles and waves and to a short inner dimension, as
NVIDIA's GEMM performance guide and Habitat (ATC'21) describe it: its 128 x 128 output tiles
fill ceil(tiles / SMs) waves over the GPU's SMs (132 on an H100 SXM or H200), so the last wave
may run part-empty (wave = tiles / (waves x SMs)); a GEMM of fewer tiles than SMs splits its k
into slices of at least 256 to occupy more of them (split-K, as cuBLAS and CUTLASS do); and each
tile's pipeline fills and drains over its k, worth k0 of inner steps (k / (k + k0)). A convolution is its implicit GEMM (m = batch x
output pixels, n = output channels, k = input channels x kernel area). "flat" is shape = 1
(the first model, commit 3ab0ab1). Both are fitted for each precision, and the one of the
lower error marked.

The memory fit minimises the relative error of a line over the rows that take longer than twice
the shortest (below that the host's issue rate is timed, not the kernel); the matmul fits seek
the least mean |log(predicted / measured)| over every GEMM and convolution row of the precision
(flat: every (fraction, fixed) of a fine grid; shaped: (fraction, k0, fixed) coarse to fine), the memory term and the issue time taken from the
fits before it. The convolutions' input, weight and output bytes count (channels-last, no
workspace).

    python3 bench/fit_gpu_efficiency.py [bench/measured/h200_2026-12-04/gpu_kernels.csv]
        [--peak-tflops fp32=67,tf32=494.5,bf16=989.5,fp16=989.5] [--bandwidth-gbs 4800] [--sms 132]
"""

import argparse
import csv
import math
import os
import re
import statistics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "bench", "measured", "h200_2026-12-04", "gpu_kernels.csv")


TILE = 128
SPLIT_K_MIN = 256


def shape_efficiency(m, n, k, k0, sms):
    """What a GEMM of m x n (inner k) keeps of the peak: with fewer tiles than SMs its k is split
    into slices of at least SPLIT_K_MIN (split-K) to occupy them; then its last wave's fill and each
    slice's k / (k + k0)."""
    tiles = math.ceil(m / TILE) * math.ceil(n / TILE)
    slices = max(1, min(sms // tiles, k // SPLIT_K_MIN))
    waves = math.ceil(tiles * slices / sms)
    depth = k / slices
    return tiles * slices / (waves * sms) * depth / (depth + k0)


def gemm_work(shape, width):
    """FLOP, bytes read and written, and (m, n, k) of an m x k by k x n product."""
    m, n, k = (int(x) for x in shape.split("x"))
    return 2.0 * m * n * k, float(width * (m * k + k * n + m * n)), (m, n, k)


def conv_work(shape, width):
    """FLOP, bytes (input, weight, output) and implicit GEMM (m, n, k) of a convolution the table
    names."""
    batch, cin, cout, size, kernel, stride = (int(x) for x in re.match(
        r"(\d+)x(\d+)->(\d+)@(\d+)k(\d+)s(\d+)", shape).groups())
    out = size // stride
    flops = 2.0 * batch * cout * out * out * cin * kernel * kernel
    moved = width * (batch * cin * size * size + cout * cin * kernel * kernel
                     + batch * cout * out * out)
    return flops, float(moved), (batch * out * out, cout, cin * kernel * kernel)


def fit_line(rows):
    """Least squares of seconds = slope * work + intercept in relative error: each row divided
    by its seconds. Returns (slope, intercept), the intercept clamped at 0 (refitted through the
    origin where it came out negative)."""
    # Normal equations of min sum (slope * w / t + b / t - 1)^2.
    a11 = sum((w / t) ** 2 for w, t in rows)
    a12 = sum(w / t ** 2 for w, t in rows)
    a22 = sum(1 / t ** 2 for w, t in rows)
    b1 = sum(w / t for w, t in rows)
    b2 = sum(1 / t for w, t in rows)
    det = a11 * a22 - a12 * a12
    slope = (b1 * a22 - b2 * a12) / det
    intercept = (a11 * b2 - a12 * b1) / det
    if intercept < 0:
        return b1 / a11, 0.0
    return slope, intercept


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernels", nargs="?", default=DEFAULT)
    parser.add_argument("--peak-tflops", default="fp32=67,tf32=494.5,bf16=989.5,fp16=989.5",
                        help="the kind's data-sheet peaks (default: the H200's)")
    parser.add_argument("--bandwidth-gbs", type=float, default=4800)
    parser.add_argument("--sms", type=int, default=132, help="streaming multiprocessors")
    args = parser.parse_args()
    peaks = {p: float(v) * 1e12 for p, v in (x.split("=") for x in args.peak_tflops.split(","))}
    with open(args.kernels) as file:
        table = list(csv.DictReader(file))

    issue = [float(r["seconds"]) for r in table
             if r["kind"] == "launch" and "back to back" in r["shape"]][0]
    print(f"issue seconds (a one-element add, back to back): {issue * 1e6:.2f} us")
    bandwidth = args.bandwidth_gbs * 1e9

    # Memory-bound: bytes moved per call, from the rate the table gives (GB/s = bytes / s / 1e9).
    rows = [(float(r["rate"]) * 1e9 * float(r["seconds"]), float(r["seconds"])) for r in table
            if r["kind"] in ("add", "relu", "copy")]
    floor = min(t for _, t in rows)
    fitted = [(w, t) for w, t in rows if t > 2 * floor]
    slope, memory_fixed = fit_line(fitted)
    memory_fraction = 1 / (slope * bandwidth)
    errors = [abs(max(issue, slope * w + memory_fixed) / t - 1) for w, t in fitted]
    print(f"memory-bound (add, relu, copy; fp32 and bf16): fraction of bandwidth "
          f"{memory_fraction:.4f}, fixed {memory_fixed * 1e6:.2f} us; {len(fitted)} of {len(rows)}"
          f" rows fitted, median |err| {statistics.median(errors):.1%}, worst {max(errors):.1%}")
    for r in table:
        if r["kind"] in ("layernorm", "softmax"):
            work = float(r["rate"]) * 1e9 * float(r["seconds"])
            predicted = max(issue, slope * work + memory_fixed)
            print(f"  not fitted: {r['kind']} {r['shape']} {r['precision']}: predicted / measured "
                  f"{predicted / float(r['seconds']):.2f}")

    print("\nprecision  model     fraction  k0    fixed (us)  mean |log|  class   rows  "
          "median |err|  worst")
    for precision, peak in peaks.items():
        width = 2 if precision in ("bf16", "fp16") else 4
        rows = []
        for r in table:
            if r["precision"] != precision or r["kind"] not in ("gemm", "conv2d"):
                continue  # bmm rows (newer tables) are printed, not fitted: the model has no batch
            flops, moved, mnk = (gemm_work if r["kind"] == "gemm" else conv_work)(r["shape"], width)
            rows.append((r["kind"], flops, moved, mnk, float(r["seconds"])))
        if not rows:
            print(f"{precision:9s}  (no rows in this table)")
            continue

        def predict(fraction, k0, fixed, flops, moved, mnk, shaped):
            shape = shape_efficiency(*mnk, k0, args.sms) if shaped else 1
            compute = flops / (peak * fraction * shape)
            memory = moved / (bandwidth * memory_fraction)
            return max(issue, max(compute, memory) + fixed)

        def loss(point, shaped):
            return statistics.fmean(abs(math.log(predict(*point, f, m, s, shaped) / t))
                                    for _, f, m, s, t in rows)

        fits = {}
        # Without shape: every (fraction, fixed) of a fine grid (the first model's fit).
        fits["flat"] = min(((fr / 1000, 0.0, fx * 1e-7) for fr in range(300, 1001, 2)
                            for fx in range(0, 301, 2)), key=lambda p: loss(p, False))
        # With shape: coarse to fine, a grid and then finer ones around the best point.
        centre, span = (0.65, 1000.0, 15e-6), (0.35, 1000.0, 15e-6)
        for _ in range(4):
            grid = [(centre[0] + span[0] * i / 10, centre[1] + span[1] * j / 10,
                     centre[2] + span[2] * h / 10)
                    for i in range(-10, 11) for j in range(-10, 11) for h in range(-10, 11)]
            grid = [(fr, k0, fx) for fr, k0, fx in grid if 0 < fr <= 1 and k0 >= 0 and fx >= 0]
            centre = min(grid, key=lambda p: loss(p, True))
            span = tuple(x / 4 for x in span)
        fits["shaped"] = centre
        chosen = min(fits, key=lambda name: loss(fits[name], name == "shaped"))
        for name, point in fits.items():
            shaped = name == "shaped"
            for kind in ("gemm", "conv2d", "both"):
                errors = [abs(predict(*point, f, m, s, shaped) / t - 1)
                          for k, f, m, s, t in rows if kind in (k, "both")]
                mark = "*" if name == chosen and kind == "both" else " "
                print(f"{precision:9s}  {name:7s} {point[0]:9.4f}  {point[1]:4.0f}  "
                      f"{point[2] * 1e6:10.2f}  {loss(point, shaped):10.3f}{mark} {kind:6s}  "
                      f"{len(errors):4d}  {statistics.median(errors):11.1%}  {max(errors):6.1%}")
    print("\n*: the model of the lower mean |log(predicted / measured)|, the one to use")

if __name__ == "__main__":
    main()
