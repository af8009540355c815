#!/usr/bin/env python3
"""The learned search's pipelines: its best pipelined candidate and its answer on each config.

Runs `placer search` on each config (its output directory under --out), reads the search's log (search.csv: every candidate judged, with its simulated
step time) and prints, per config: the answer (the fastest valid candidate) with its shape, the
fastest valid pipelined candidate (micro-batches > 1, written "1/M/schedule:..." in the log) and
whether its stages are contiguous; then `placer evaluate --simulate` of the best_placement.yaml the
search wrote (which carries micro_batches and schedule when the answer is a pipeline) for the
answer's peak memory per device. Contiguity: the groups are in topological order (the policy's
order); a pipelined candidate is contiguous when every device's groups form one unbroken run of
that order, i.e. the device sequence never returns to a device it has left.

    python3 bench/pipeline_search.py [--build build] [--out /tmp/placer_pipelines] [--reuse]
                                     CONFIG...

CONFIG is a ready config's name (configs/<name>.yaml, run where it is, with its search budget and
expert) or onnx_resnet18_sim_4gpu / onnx_resnet18_sim_8gpu, written as bench/search_suite.py
writes it (scripts/export_onnx.py into --out/onnx first; the default budget, 60 s).
"""

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import search_suite  # noqa: E402  (the ONNX configs, written the same way)

ROOT = search_suite.ROOT


def contiguous(options):
    seen, previous = set(), None
    for option in options:
        if option != previous:
            if option in seen:
                return False
            seen.add(option)
            previous = option
    return True


def shape_of(candidate):
    head, options = candidate.split(":", 1)
    parts = head.split("/")
    replicas = int(parts[0])
    micro_batches, schedule = (int(parts[1]), parts[2]) if len(parts) == 3 else (1, "gpipe")
    return replicas, micro_batches, schedule, [int(o) for o in options.split(",") if o]


def config_for(name, out):
    """A ready config is used where it is (its expert placement is found next to it); an ONNX
    config is written as bench/search_suite.py writes it."""
    if not name.startswith("onnx_"):
        return os.path.join(ROOT, "configs", name + ".yaml")
    model, machine = re.fullmatch(r"onnx_(.+)_(sim_\d+gpu)", name).groups()
    onnx = os.path.join(out, "onnx", model + ".onnx")
    if not os.path.exists(onnx):
        return dict(search_suite.onnx_configs(out, "^" + re.escape(name) + "$"))[name]
    devices, link = search_suite.MACHINES[machine]
    batch = dict(search_suite.ONNX_MODELS)[model]
    path = os.path.join(out, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"model:\n  onnx: {onnx}\n  batch_size: {batch}\ndevices: {devices}\n"
                f"search:\n  evaluator: simulated\nsimulation:\n  gpu_link: {link}\n")
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default="/tmp/placer_pipelines")
    parser.add_argument("--reuse", action="store_true",
                        help="read the runs already in --out instead of searching again")
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print("| config | answer | its shape | its peak memory per device (GiB) | best pipelined | "
          "its shape | contiguous | evaluations |")
    print("| --- | ---: | --- | --- | ---: | --- | --- | ---: |")
    for name in args.configs:
        path = config_for(name, args.out)
        run_dir = os.path.join(args.out, name)
        start = time.time()
        if not args.reuse:
            shutil.rmtree(run_dir, ignore_errors=True)  # a search refuses a used directory
            result = subprocess.run([os.path.join(args.build, "placer"), "search", "--config",
                                     path, "--output", run_dir], capture_output=True, text=True)
            with open(os.path.join(args.out, name + ".log"), "w") as f:
                f.write(result.stdout + result.stderr)
            if result.returncode != 0:
                print(f"| {name} | failed (exit {result.returncode}), see {args.out}/{name}.log |")
                continue
        best, best_pipe, rows = None, None, 0
        with open(os.path.join(run_dir, "search.csv")) as f:
            for row in csv.DictReader(f):
                rows += 1
                if row["valid"] != "1":
                    continue
                seconds = float(row["step_seconds"])
                if best is None or seconds < best[0]:
                    best = (seconds, row["candidate"], row["origin"] or row["phase"])
                if "/" in row["candidate"].split(":")[0] and (
                        best_pipe is None or seconds < best_pipe[0]):
                    best_pipe = (seconds, row["candidate"], row["origin"] or row["phase"])

        # The answer as the search wrote it, evaluated from its file.
        evaluated = subprocess.run(
            [os.path.join(args.build, "placer"), "evaluate", "--config", path, "--placement",
             os.path.join(run_dir, "best_placement.yaml"), "--simulate"],
            capture_output=True, text=True)
        peaks = [float(m.group(1)) / 1024 for m in
                 re.finditer(r"^\S+\s+[0-9.]+\s+[0-9]+%\s+([0-9.]+) MiB$", evaluated.stdout, re.M)]
        simulated = re.search(r"simulated \(.*\): ([0-9.]+) ms", evaluated.stdout)
        peak_text = " / ".join(f"{p:.2f}" for p in peaks) if peaks else "evaluate failed"
        if simulated and best and abs(float(simulated.group(1)) - best[0] * 1e3) > 1e-3 * best[0] * 1e3:
            peak_text += f" (its file simulates at {simulated.group(1)} ms)"

        def shape(entry):
            r, m, s, _ = shape_of(entry[1])
            text = f"R = {r}" if m == 1 else f"M = {m}, {s}"
            return f"{text} ({entry[2]})"

        pipe = "none valid" if best_pipe is None else f"{best_pipe[0] * 1e3:.2f} ms"
        pipe_shape = "" if best_pipe is None else shape(best_pipe)
        pipe_contiguous = "" if best_pipe is None else (
            "yes" if contiguous(shape_of(best_pipe[1])[3]) else "no")
        answer = "none valid" if best is None else f"{best[0] * 1e3:.2f} ms"
        print(f"| {name} | {answer} | {shape(best) if best else ''} | {peak_text} | {pipe} | {pipe_shape} | "
              f"{pipe_contiguous} | {rows} |   ({time.time() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
