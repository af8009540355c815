#!/usr/bin/env python3
"""Peak resident memory of `placer compare`, two builds side by side (issue 30).

For every config, runs `placer compare` with each binary in turn (alternating which goes first per
round), each under /usr/bin/time -v, and prints per config: each binary's maximum resident set
(median over the rounds, and every round), the ratio new / base, the wall time, the evaluations
the learned search reached (its row of the report; every round), and whether the
baseline rows (every row of kind "baseline" but random search: single devices, data parallelism,
the algorithms, the pipeline and Megatron-style grids) have the same step times in both, which
they must when only memory changed.

    python3 bench/compare_memory_ab.py BASE/build/placer build/placer CONFIG.yaml... \\
        [--seconds S] [--onnx EXPORT.onnx --batch N] [--rounds K] [--out DIR]

--seconds: each search's max_wall_seconds (the config's own when left out); the peak is in the
set-up's steps and the grids, not in how long the searches run, but a quoted figure should say
which budget it ran with. --onnx/--batch: place that export (at that batch) instead of the
config's model, on the config's devices; e.g. torchvision's ResNet-50, exported by
`scripts/export_onnx.py --suite --out DIR resnet50`. The config run is a copy written beside the
original (a built-in model's expert row is read from experts/ there) and removed afterwards; each
run starts in that folder, as relative paths in a config are read from there.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import yaml


def config_for(path, seconds, onnx, batch):
    with open(path) as f:
        config = yaml.safe_load(f)
    if seconds is not None:
        config.setdefault("search", {})["max_wall_seconds"] = seconds
    if onnx:
        config["model"] = {"onnx": os.path.abspath(onnx), "batch_size": batch}
    name = os.path.basename(path)
    if onnx:
        name = f"{os.path.splitext(os.path.basename(onnx))[0]}_on_{name}"
    out = os.path.join(os.path.dirname(os.path.abspath(path)), f".memory_ab_{name}")
    with open(out, "w") as f:
        yaml.safe_dump(config, f)
    return out


def run(placer, config, cwd, out_dir):
    command = ["/usr/bin/time", "-v", os.path.abspath(placer), "compare", "--config", config,
               "-o", out_dir]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}"
                 f"{done.stderr[-2000:]}")
    kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr)
    with open(os.path.join(out_dir, "report.json")) as f:
        report = json.load(f)
    baselines = {row["method"]: row["step_seconds"] if row["valid"] else row["invalid_reason"]
                 for row in report["rows"]
                 if row["kind"] == "baseline" and not row["method"].startswith("random search")}
    learned = [row["evaluations"] for row in report["rows"] if row["kind"] == "learned"]
    return kib * 1024, wall.group(1), baselines, learned[-1] if learned else 0


def report_config(args, config, work):
    """Runs both binaries on `config` and prints its row."""
    cwd = os.path.dirname(config)
    name = os.path.basename(config)[len(".memory_ab_"):]
    peaks = {"base": [], "new": []}
    walls = {"base": [], "new": []}
    evaluations = {"base": [], "new": []}
    rows = {}
    for k in range(args.rounds):
        order = ["base", "new"] if k % 2 == 0 else ["new", "base"]
        for which in order:
            placer = args.base if which == "base" else args.new
            out_dir = os.path.join(work, f"{name}.{which}.{k}")
            peak, wall, baselines, learned = run(placer, config, cwd, out_dir)
            peaks[which].append(peak / 1e9)
            walls[which].append(wall)
            evaluations[which].append(str(learned))
            rows.setdefault(which, baselines)
            if rows[which] != baselines:
                print(f"note: {which}'s baseline rows differ between rounds", file=sys.stderr)
    same = "the same" if rows["base"] == rows["new"] else "DIFFER"
    if same != "the same":
        for method in sorted(set(rows["base"]) | set(rows["new"])):
            a, b = rows["base"].get(method), rows["new"].get(method)
            if a != b:
                print(f"  {method}: base {a}, new {b}", file=sys.stderr)
    base, new = statistics.median(peaks["base"]), statistics.median(peaks["new"])
    every = lambda xs: " / ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    print(f"| {name} | {base:.2f} ({every(peaks['base'])}) | "
          f"{new:.2f} ({every(peaks['new'])}) | {new / base:.3f} | "
          f"{' '.join(walls['base'])} / {' '.join(walls['new'])} | "
          f"{' '.join(evaluations['base'])} / {' '.join(evaluations['new'])} | {same} |",
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--onnx")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if bool(args.onnx) != bool(args.batch):
        sys.exit("--onnx and --batch go together")
    work = args.out or tempfile.mkdtemp(prefix="compare_memory_ab_")
    os.makedirs(work, exist_ok=True)
    print("| config | base peak RSS (GB) | new peak RSS (GB) | new / base | wall base / new | "
          "learned search's evaluations base / new | baseline rows |")
    print("| --- | ---: | ---: | ---: | --- | --- | --- |")
    for path in args.configs:
        config = config_for(path, args.seconds, args.onnx, args.batch)
        try:
            report_config(args, config, work)
        finally:
            os.remove(config)


if __name__ == "__main__":
    main()
