#!/usr/bin/env python3
"""Evaluations per second through a pool of workers, two builds side by side.

Runs build A's and build B's `bench/cluster_bench` (one trial each, A and B alternating, the
order swapped every repeat), so that the drift of a shared machine hits both alike, and prints
each repeat's rates, each build's median and range, and B / A per repeat with its median and
range. Written to compare the sealed cluster messages (B, this tree) with the unsealed ones of the
commit before them (A, a worktree of it built the same way).

    python3 bench/cluster_ab.py --a /work/wt-base/build --b build [--workers 2] [--tasks 16]
        [--repeats 7] [--kind measured|simulated]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

RATE = re.compile(r"^workers (\d+): median ([0-9.]+) evaluations/s")


def trial(build, args):
    command = [os.path.join(build, "bench", "cluster_bench"), "--workers", str(args.workers),
               "--tasks", str(args.tasks), "--repeats", "1"]
    if args.kind != "measured":  # builds before --kind measure only "measured"
        command += ["--kind", args.kind]
    out = subprocess.run(command, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        m = RATE.match(line)
        if m and int(m.group(1)) == args.workers:
            return float(m.group(2))
    sys.exit(f"{' '.join(command)} failed (exit {out.returncode}):\n{out.stdout}{out.stderr}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="build folder of A (the reference)")
    parser.add_argument("--b", required=True, help="build folder of B")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--kind", default="measured", choices=["measured", "simulated"])
    args = parser.parse_args()
    rates = {"A": [], "B": []}
    print(f"cluster_ab: {args.kind}, {args.workers} workers, {args.tasks} tasks per trial, "
          f"{args.repeats} repeats, A = {args.a}, B = {args.b}", flush=True)
    for r in range(args.repeats):
        order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
        for which in order:
            rates[which].append(trial(args.a if which == "A" else args.b, args))
        print(f"repeat {r + 1}: A {rates['A'][-1]:.2f}/s, B {rates['B'][-1]:.2f}/s, "
              f"B/A {rates['B'][-1] / rates['A'][-1]:.3f}", flush=True)
    for which in "AB":
        v = rates[which]
        print(f"{which}: median {statistics.median(v):.2f} evaluations/s "
              f"(range {min(v):.2f}-{max(v):.2f})")
    ratios = [b / a for a, b in zip(rates["A"], rates["B"])]
    print(f"B/A: median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f},"
          f" per repeat); ratio of medians "
          f"{statistics.median(rates['B']) / statistics.median(rates['A']):.3f}")


if __name__ == "__main__":
    main()
