#!/usr/bin/env python3
"""The learned search against every other method, on every ready config and on ONNX exports.

Runs `placer compare` on each config (a copy whose output directory is under --out), reads the
report.json it writes, and prints one row per config: the learned placement's step time, the best
other row (single devices, data parallelism, the expert, the algorithms, random search; not the
search's own ablations), their ratio, the ratio to the lower bound, planning seconds (the search
with its set-up: models at every replica count, baselines, profiles), evaluations, and whether the
learned placement is a hybrid of data and model parallelism. Then the geometric mean of the ratios,
and the learning's delta (issue 27): per config the policy zero-shot, the policy alone,
refinement alone and the learned search, each with its evaluations, and learned / refinement alone.

    python3 bench/search_suite.py [--build build] [--out /tmp/placer_suite] [--only REGEX]
                                  [--skip-measured]

ONNX models are exported by scripts/export_onnx.py with the project's Python (torch, torchvision);
each is placed on a simulated 4-GPU PCIe box and an 8-GPU NVLink box.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, model section, batch) of the ONNX exports placed here.
ONNX_MODELS = [
    ("resnet18", 256),
    ("transformer", 64),
    ("towers", 256),
]
MACHINES = {
    "sim_4gpu": ("[cuda:0, cuda:1, cuda:2, cuda:3]", "pcie"),
    "sim_8gpu": ("[cuda:0, cuda:1, cuda:2, cuda:3, cuda:4, cuda:5, cuda:6, cuda:7]", "nvlink"),
}


def project_python():
    if os.environ.get("PLACER_PYTHON"):
        return os.environ["PLACER_PYTHON"]
    cache = os.environ.get("PLACER_CACHE", os.path.expanduser("~/.cache/placer"))
    with open(os.path.join(ROOT, "scripts", "lib.sh")) as f:
        version = re.search(r'PLACER_TORCH_VERSION="([^"]+)"', f.read()).group(1)
    return os.path.join(cache, f"venv-torch-{version}", "bin", "python")


def ready_configs():
    names = sorted(f for f in os.listdir(os.path.join(ROOT, "configs"))
                   if f.startswith("compare_") and f.endswith(".yaml"))
    return [(n[len("compare_"):-len(".yaml")], os.path.join(ROOT, "configs", n)) for n in names]


def onnx_configs(out, only):
    wanted = [(m, b) for m, b in ONNX_MODELS
              if any(re.search(only, f"onnx_{m}_{k}") for k in MACHINES)]
    if not wanted:
        return []
    export_dir = os.path.join(out, "onnx")
    subprocess.run([project_python(), os.path.join(ROOT, "scripts", "export_onnx.py"), "--out",
                    export_dir] + [m for m, _ in wanted], check=True)
    configs = []
    for model, batch in wanted:
        for machine, (devices, link) in MACHINES.items():
            name = f"onnx_{model}_{machine}"
            path = os.path.join(out, name + ".yaml")
            with open(path, "w") as f:
                f.write(f"model:\n  onnx: {os.path.join(export_dir, model + '.onnx')}\n"
                        f"  batch_size: {batch}\ndevices: {devices}\n"
                        f"search:\n  evaluator: simulated\nsimulation:\n  gpu_link: {link}\n")
            configs.append((name, path))
    return configs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default="/tmp/placer_suite")
    parser.add_argument("--only", default=".", help="regex on the config names")
    parser.add_argument("--skip-measured", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    configs = [(n, p) for n, p in ready_configs() if re.search(args.only, n)]
    configs += onnx_configs(args.out, args.only)
    rows, deltas = [], []
    header = (f"| {'config':<28} | {'learned':>10} | {'best other':>34} | {'learned / best':>14} | "
              f"{'learned / LB':>12} | {'planning s':>10} | {'evals':>7} | {'hybrid':>6} |")
    print(header, flush=True)
    for name, path in configs:
        with open(path) as f:
            text = f.read()
        if args.skip_measured and "evaluator: measured" in text:
            continue
        run_dir = os.path.join(args.out, name)
        start = time.time()
        result = subprocess.run([os.path.join(args.build, "placer"), "compare", "--config", path,
                                 "--output", run_dir], capture_output=True, text=True)
        with open(os.path.join(args.out, name + ".log"), "w") as f:
            f.write(result.stdout + result.stderr)
        if result.returncode != 0:
            print(f"| {name:<28} | failed (exit {result.returncode}): see "
                  f"{os.path.join(args.out, name + '.log')}", flush=True)
            continue
        with open(os.path.join(run_dir, "report.json")) as f:
            report = json.load(f)
        learned = next(r for r in report["rows"] if r["kind"] == "learned")
        others = [r for r in report["rows"] if r["kind"] == "baseline" and r["valid"]]
        best = min(others, key=lambda r: r["step_seconds"])
        ratio = learned["step_seconds"] / best["step_seconds"]
        bound = report["lower_bound_seconds"]
        rows.append((name, ratio))
        deltas.append((name, learned, {r["method"]: r for r in report["rows"]
                                       if r["kind"] == "ablation"}))
        print(f"| {name:<28} | {learned['step_seconds'] * 1e3:>7.2f} ms | "
              f"{best['method'][:22]:>22} {best['step_seconds'] * 1e3:>8.2f} ms | {ratio:>14.3f} | "
              f"{learned['step_seconds'] / bound if bound > 0 else float('nan'):>12.2f} | "
              f"{learned['seconds_to_produce']:>10.1f} | {learned['evaluations']:>7} | "
              f"{'yes' if learned['hybrid'] else 'no':>6} |   ({time.time() - start:.0f} s)",
              flush=True)
    if rows:
        geomean = math.exp(sum(math.log(r) for _, r in rows) / len(rows))
        print(f"\ngeometric mean of learned / best other over {len(rows)} configs: {geomean:.3f}")
        print(f"configs where learned / best other > 1.00: "
              f"{[n for n, r in rows if r > 1.0 + 1e-9] or 'none'}")
    print_learning_delta(deltas)
    return 0


def print_learning_delta(deltas):
    """What the learning adds: the policy before this run, the policy alone, refinement alone and
    both, with the evaluations each spent."""
    def cell(row):
        if row is None:
            return f"{'-':>19}"
        time = f"{row['step_seconds'] * 1e3:.2f} ms" if row["valid"] else "invalid"
        return f"{time:>11} {row['evaluations']:>7}"
    print(f"\n| {'config':<28} | {'zero-shot (ms, evals)':>19} | {'policy alone':>19} | "
          f"{'refinement alone':>19} | {'learned':>19} | {'learned / refinement':>20} |")
    ratios = []
    for name, learned, ablations in deltas:
        refinement = ablations.get("refinement alone")
        ratio = (learned["step_seconds"] / refinement["step_seconds"]
                 if refinement and refinement["valid"] else float("nan"))
        if not math.isnan(ratio):
            ratios.append(ratio)
        print(f"| {name:<28} | {cell(ablations.get('policy zero-shot'))} | "
              f"{cell(ablations.get('policy alone'))} | {cell(refinement)} | {cell(learned)} | "
              f"{ratio:>20.3f} |")
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ngeometric mean of learned / refinement alone over {len(ratios)} configs: "
              f"{geomean:.3f}")


if __name__ == "__main__":
    sys.exit(main())
