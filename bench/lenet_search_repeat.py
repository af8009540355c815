#!/usr/bin/env python3
"""The default search, run again and again: is its answer reliably faster than data parallelism?

Runs `placer search --config configs/lenet.yaml` N times in a row (each into its own output
directory under --out) and reads the closing side-by-side each run prints: the answer row
("learned: ...") and the line "answer vs data parallelism: R [low, high]: faster|tied|slower",
the answer's step time over the data-parallel row's, paired round by round, with its 95%
bootstrap interval. Per run it prints the answer, data parallelism, that ratio and interval, and
the verdict: faster (the interval entirely below 1), tied (it contains 1), slower (entirely
above 1). At the end, how many runs were each. The check fails (exit 1) when a run's answer is
reliably slower than data parallelism, or a run fails.

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
# | method | 12.345 ms | 11.00-13.00 | 0.987 [0.951, 1.024] | 0.512 [0.498, 0.530] | tied |
ROW = re.compile(r"^\| (.+?)\s+\|\s+([0-9.]+) ms \|")
VERSUS = re.compile(r"^answer vs data parallelism: ([0-9.]+)(?: \[([0-9.]+), ([0-9.]+)\])?: "
                    r"(faster|tied|slower)$")
ROUNDS = re.compile(r"\b([0-9]+) rounds?\b")


def parse(stdout):
    """The rows' step times (ms) by method, the answer line, and the verdict against data
    parallelism: (ratio, low, high, verdict), or None."""
    rows, answer, versus = {}, "", None
    for line in stdout.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = float(m.group(2))
        if line.startswith("answer: "):
            answer = line
        m = VERSUS.match(line)
        if m:
            ratio = float(m.group(1))
            low = float(m.group(2)) if m.group(2) else ratio
            high = float(m.group(3)) if m.group(3) else ratio
            versus = (ratio, low, high, m.group(4))
    return rows, answer, versus


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "lenet.yaml"))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", default="/tmp/lenet_repeat")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    print("| run | answer (ms) | answer is | data parallel (ms) | answer / DP [95% interval] "
          "| rounds | verdict |", flush=True)
    print("| ---: | ---: | --- | ---: | ---: | ---: | --- |", flush=True)
    counts = {"faster": 0, "tied": 0, "slower": 0}
    failed, answers, parallel = 0, [], []
    for run in range(1, args.runs + 1):
        out_dir = os.path.join(args.out, f"run{run}")
        result = subprocess.run([os.path.join(args.build, "placer"), "search", "--config",
                                 args.config, "--output", out_dir], capture_output=True, text=True)
        with open(out_dir + ".log", "w") as f:
            f.write(result.stdout + result.stderr)
        rows, answer_line, versus = parse(result.stdout)
        answer = next(((k, v) for k, v in rows.items() if k.startswith("learned: ")), None)
        dp = next(((k, v) for k, v in rows.items() if k.startswith("data parallel")), None)
        if result.returncode != 0 or answer is None or dp is None or versus is None:
            failed += 1
            print(f"| {run} | failed (exit {result.returncode}): see {out_dir}.log |", flush=True)
            continue
        (name, a_ms), (_, d_ms) = answer, dp
        ratio, low, high, verdict = versus
        counts[verdict] += 1
        answers.append(a_ms)
        parallel.append(d_ms)
        rounds = ROUNDS.search(answer_line)
        print(f"| {run} | {a_ms:.2f} | {name[len('learned: '):]} | {d_ms:.2f} "
              f"| {ratio:.3f} [{low:.3f}, {high:.3f}] | {rounds.group(1) if rounds else '?'} "
              f"| {verdict} |", flush=True)
    if answers:
        print(f"\nmedians over {len(answers)} runs: answer {statistics.median(answers):.2f} ms, "
              f"data parallel {statistics.median(parallel):.2f} ms")
    print(f"against data parallelism: {counts['faster']} faster, {counts['tied']} tied, "
          f"{counts['slower']} slower (of {args.runs} runs; {failed} failed)")
    return 1 if counts["slower"] or failed else 0


if __name__ == "__main__":
    sys.exit(main())
