#!/usr/bin/env python3
"""Two builds of sim_speed_bench side by side (issue 30): for each config, the baseline binary
and the candidate run one after the other, `--rounds` times, alternating which goes first; the
table gives each shape's median rate of single-group edits over the rounds, their ratio, and
whether the two builds judged every edit alike (the verdicts' digests).

Usage: bench/sim_speed_ab.py BASE_BENCH NEW_BENCH [--rounds 2] [--seconds 0.5] CONFIG...
"""
import argparse
import statistics
import subprocess


def run(binary, config, seconds):
    out = subprocess.run([binary, "--seconds", str(seconds), config], check=True,
                         capture_output=True, text=True).stdout
    setup, rows, memory = "", {}, ""
    for line in out.splitlines():
        if line.startswith(config):
            setup = line.split("set-up")[-1].strip()
        elif line.startswith("| ") and not line.startswith("| shape"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = {"ops": cells[1], "rate": float(cells[3]), "prefix": cells[4],
                              "digest": cells[5]}
        elif line.startswith("peak memory"):
            memory = line.split(":")[1].split("(")[0].strip()
    return setup, rows, memory


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=0.5)
    args = parser.parse_args()
    for config in args.configs:
        runs = {"base": [], "new": []}
        for r in range(args.rounds):
            order = ["base", "new"] if r % 2 == 0 else ["new", "base"]
            for which in order:
                runs[which].append(run(getattr(args, which), config, args.seconds))
        print(f"\n{config}: set-up base {', '.join(s for s, _, _ in runs['base'])}; "
              f"new {', '.join(s for s, _, _ in runs['new'])}; peak memory base "
              f"{runs['base'][-1][2]}, new {runs['new'][-1][2]}")
        print("| shape | ops | base edits/s | new edits/s | new / base | ops before the first "
              "change | same verdicts |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for shape, row in runs["base"][0][1].items():
            base = statistics.median(rows[shape]["rate"] for _, rows, _ in runs["base"])
            new = statistics.median(rows[shape]["rate"] for _, rows, _ in runs["new"])
            same = all(rows[shape]["digest"] == row["digest"]
                       for _, rows, _ in runs["base"] + runs["new"])
            print(f"| {shape} | {row['ops']} | {base:.1f} | {new:.1f} | {new / base:.2f} | "
                  f"{row['prefix']} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
