#!/usr/bin/env python3
"""The default search, run again and again: does its answer ever lose to data parallelism?

Runs `placer search --config configs/lenet.yaml` N times in a row (each into its own output
directory under --out), reads the closing side-by-side table each run prints, and prints per run:
the answer's step time and which row it is (a search candidate or a baseline), the data-parallel
row, their difference, and the spread of the rounds of both rows. A run fails the check when its
answer is slower than its data-parallel row by more than the larger of the two spreads.

    python3 bench/lenet_search_repeat.py [--build build] [--runs 10] [--out /tmp/lenet_repeat]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# | method | 12.345 ms | 11.00-13.00 | 1.234x |
ROW = re.compile(r"^\| (.+?)\s+\|\s+([0-9.]+) ms \|\s+([0-9.]+)-([0-9.]+)\s+\|")


def parse(stdout):
    rows = {}
    for line in stdout.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(4)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "lenet.yaml"))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", default="/tmp/lenet_repeat")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    print("| run | answer (ms) | answer is | data parallel (ms) | answer - DP (ms) | spread (ms) "
          "| check |", flush=True)
    print("| ---: | ---: | --- | ---: | ---: | ---: | --- |", flush=True)
    failures, answers, parallel = 0, [], []
    for run in range(1, args.runs + 1):
        out_dir = os.path.join(args.out, f"run{run}")
        result = subprocess.run([os.path.join(args.build, "placer"), "search", "--config",
                                 args.config, "--output", out_dir], capture_output=True, text=True)
        with open(out_dir + ".log", "w") as f:
            f.write(result.stdout + result.stderr)
        rows = parse(result.stdout)
        answer = next(((k, v) for k, v in rows.items() if k.startswith("learned: ")), None)
        dp = next(((k, v) for k, v in rows.items() if k.startswith("data parallel")), None)
        if result.returncode != 0 or answer is None or dp is None:
            failures += 1
            print(f"| {run} | failed (exit {result.returncode}): see {out_dir}.log |", flush=True)
            continue
        (name, (a_ms, a_lo, a_hi)), (_, (d_ms, d_lo, d_hi)) = answer, dp
        spread = max(a_hi - a_lo, d_hi - d_lo)
        ok = a_ms - d_ms <= spread
        failures += not ok
        answers.append(a_ms)
        parallel.append(d_ms)
        print(f"| {run} | {a_ms:.2f} | {name[len('learned: '):]} | {d_ms:.2f} | {a_ms - d_ms:+.2f} "
              f"| {spread:.2f} | {'ok' if ok else 'FAILED'} |", flush=True)
    if answers:
        print(f"\nmedians over {len(answers)} runs: answer {statistics.median(answers):.2f} ms, "
              f"data parallel {statistics.median(parallel):.2f} ms; "
              f"runs failing the check: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
