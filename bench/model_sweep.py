#!/usr/bin/env python3
"""The model sweep of issue 33: timm's and transformers' architectures through placer.

Run it with the project's Python (scripts/lib.sh: placer_python) after ./scripts/build.sh and
`cmake --build build --target onnx_step_check`:

    source scripts/lib.sh && "$(placer_python)" bench/model_sweep.py --sample --out /tmp/sweep

For every architecture (timm: `timm.list_models()`; transformers: the model classes of its auto
mappings for causal LM, masked LM, sequence-to-sequence LM and image classification), in a
subprocess each:
  1. build it with random weights, nothing downloaded (timm: no pretrained weights, 10 classes,
     the smallest of 64x64, the model's minimum and its default input that it runs on;
     transformers: the config class's defaults shrunk, see SMALL), export it to ONNX in training
     mode with a dynamic batch and write PyTorch's own training step on a fixed minibatch as
     <model>.reference.onnx -- both exactly as the model suite is exported and referenced
     (scripts/onnx_suite.py's export and write_reference);
  2. `placer inspect` on it (batch 8, 4 simulated GPUs);
  3. one training step under a random placement over two CPU workers, compared with PyTorch's
     step within tests/pytorch_step.h's tolerances (build/bench/onnx_step_check);
  4. `placer compare` on 4 simulated GPUs with a small search budget (5 s of wall time), the
     configuration tests/onnx_suite_test.cc runs the model suite with.
f32_vs_f64 says how far PyTorch's own float32 step is from its float64 step, in the same
tolerances: above 1 the model is ill-conditioned at the swept size, and a step that differs from
PyTorch's is listed under that cause, not under placer's.
It appends a row per model to DIR/results.csv (a re-run skips the models already there) and
writes DIR/table.md and DIR/summary.md: per library, how many export, load, step equal to PyTorch
and compare, and our failures grouped by cause (the first error line with names, numbers and
shapes blanked), most frequent first. Models that PyTorch cannot build at the shrunk size ("not
built"), or that torch.onnx.export or PyTorch's own training step fails on ("export failed"), are
counted apart: they are not failures of placer.

--sample picks a fixed spread of the models: families (timm's modules, transformers' model types)
in the order of a hash of their names, one model each (timm: its smallest-sounding variant), 40
of timm and 25 of transformers unless --limit says otherwise.
"""

import argparse
import concurrent.futures
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback

from sweep_models import (SAMPLE_SIZES, export_one, spread_sample, timm_candidates,
                          transformers_candidates)
from sweep_report import (COLUMNS, cause_of, error_line, fail, first_line, passed, read_rows,
                          seconds, write_summary, write_table)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------------------------
# Running the stages (parent process)

# The simulated compare of tests/onnx_suite_test.cc (batch 8: data-parallel shards of 2).
COMPARE_CONFIG = """model:
  onnx: {onnx}
  batch_size: 8
devices: [cuda:0, cuda:1, cuda:2, cuda:3]
search: {{evaluator: simulated, policy_steps: 2, samples_per_step: 2, max_evaluations: 4, \
refinement_rounds: 2, max_wall_seconds: 5}}
simulation: {{gpu_link: pcie}}
output: {{directory: run}}
"""


def run(command, timeout, cwd=None):
    """(exit code or 'timeout', output, seconds) of `command` under nice."""
    start = time.monotonic()
    try:
        done = subprocess.run(["nice", "-n", "10"] + command, cwd=cwd, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", env=dict(os.environ, OMP_NUM_THREADS="1"))
        code, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout or ""
        code = "timeout"
        output = (out.decode(errors="replace") if isinstance(out, bytes) else out)
        output += f"\nerror: timeout after {timeout} s"
    return code, output, round(time.monotonic() - start, 1)


def describe_exit(code):
    if code == "timeout":
        return "timeout"
    return f"killed by signal {-code}" if code < 0 else f"exit {code}"


def export_stage(candidate, workdir, args):
    """The export's result, from an earlier run's export.json (--export-only, or a sweep that
    stopped) or from a fresh export in a child process."""
    saved = os.path.join(workdir, "export.json")
    try:
        with open(saved) as f:
            result = json.load(f)
        if result["exported"] != "yes" or all(
                os.path.exists(os.path.join(workdir, n))
                for n in ("model.onnx", "model.reference.onnx")):
            return result
    except (OSError, ValueError, KeyError):
        pass
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    code, output, took = run(
        [sys.executable, os.path.abspath(__file__), "--export-one", candidate["library"],
         candidate["model"], candidate["family"], candidate["task"], workdir,
         str(args.max_params)], args.timeout)
    try:
        result = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        # The child died (out of memory, a crash in the exporter) or ran out of time: not saved,
        # a later run tries again.
        return {"exported": "export failed", "seconds": took,
                "error": f"export process {describe_exit(code)}: {error_line(output)}"}
    result["seconds"] = took
    with open(saved, "w") as f:
        json.dump(result, f)
    return result


def sweep_one(candidate, args):
    """All stages of one model; returns its row."""
    row = dict.fromkeys(COLUMNS, "")
    row.update({k: candidate[k] for k in ("model", "library", "family", "task")})
    workdir = os.path.join(args.out, "work", candidate["library"], candidate["model"])
    result = export_stage(candidate, workdir, args)
    row.update(exported=result["exported"], input=result.get("input", ""),
               params=result.get("params", ""), export_s=result["seconds"],
               f32_vs_f64=result.get("f32_vs_f64", ""),
               unused=" ".join(result.get("unused", [])), frozen=" ".join(result.get("frozen", [])))
    if result["exported"] != "yes":
        row.update(stage="export", error=result["error"])
        row["cause"] = cause_of(row)
        return row
    if args.export_only:
        return row

    model = os.path.join(workdir, "model.onnx")
    with open(os.path.join(workdir, "c.yaml"), "w") as f:
        f.write(COMPARE_CONFIG.format(onnx=model))
    placer = os.path.join(args.build, "placer")

    code, output, row["inspect_s"] = run([placer, "inspect", "--config", "c.yaml"], args.timeout,
                                         cwd=workdir)
    row["loads"] = "yes" if code == 0 else "no"
    if code != 0:
        fail(row, "inspect", f"{describe_exit(code)}: " if code != 2 else "", output)

    code, output, row["step_s"] = run(
        [args.step_check, model,
         os.path.join(workdir, "model.reference.onnx"), candidate["model"]], args.timeout)
    row["step"] = {0: "equal", 1: "differs", 2: "error"}.get(code, describe_exit(code))
    if code != 0:
        fail(row, "step", "" if code in (1, 2) else f"{describe_exit(code)}: ", output)

    with open(os.path.join(workdir, "step.txt"), "w") as f:
        f.write(output)

    if row["loads"] == "yes":
        code, output, row["compare_s"] = run([placer, "compare", "--config", "c.yaml"],
                                             args.timeout, cwd=workdir)
        report = os.path.join(workdir, "run", "report.md")
        row["compare"] = "yes" if code == 0 and os.path.exists(report) else "no"
        if row["compare"] != "yes":
            fail(row, "compare", f"{describe_exit(code)}: " if code != 2 else "", output)
    else:
        row["compare"] = "-"
    if not args.keep_exports and not row["stage"]:
        shutil.rmtree(workdir, ignore_errors=True)  # everything passed: nothing to look at
    return row


# ---------------------------------------------------------------------------------------------


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--library", choices=("timm", "transformers", "both"), default="both")
    parser.add_argument("--sample", action="store_true",
                        help="a fixed spread over the families (40 timm, 25 transformers)")
    parser.add_argument("--limit", type=int, help="models per library (spread as --sample)")
    parser.add_argument("--filter", default="", help="regex on the model name")
    parser.add_argument("--out", help="output folder (required; results.csv resumes)")
    parser.add_argument("--jobs", type=int, default=1, help="models swept at once")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per stage")
    parser.add_argument("--max-params", type=int, default=100_000_000,
                        help="models with more parameters are skipped as too large")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="placer's build")
    parser.add_argument("--step-check", help="the onnx_step_check program "
                        "(default: BUILD/bench/onnx_step_check)")
    parser.add_argument("--keep-exports", action="store_true",
                        help="keep every model's files (by default only failures' are kept)")
    parser.add_argument("--list", action="store_true", help="print the models and stop")
    parser.add_argument("--export-only", action="store_true",
                        help="only export (kept for the next run, which then skips exporting)")
    parser.add_argument("--export-one", nargs=6, help=argparse.SUPPRESS)
    return parser.parse_args()


def choose(args):
    chosen = []
    for library in ("timm", "transformers"):
        if args.library not in (library, "both"):
            continue
        candidates = timm_candidates() if library == "timm" else transformers_candidates()
        candidates = [c for c in candidates if re.search(args.filter, c["model"])]
        count = args.limit or (SAMPLE_SIZES[library] if args.sample else None)
        chosen += spread_sample(candidates, count) if count else candidates
    return chosen


def main():
    args = parse_args()
    if args.export_one:
        library, name, family, task, workdir, max_params = args.export_one
        try:
            result = export_one(library, name, family, task, workdir, int(max_params))
        except Exception as error:  # noqa: BLE001 -- reported as the row's error, not a crash
            traceback.print_exc()
            result = {"exported": "export failed",
                      "error": f"{type(error).__name__}: {first_line(str(error))}"}
        print(json.dumps(result))
        return
    if not args.out and not args.list:
        sys.exit("model_sweep.py: --out DIR is required")
    chosen = choose(args)
    if args.list:
        for c in chosen:
            print(c["library"], c["family"], c["model"])
        return
    args.step_check = args.step_check or os.path.join(args.build, "bench", "onnx_step_check")
    for tool in (os.path.join(args.build, "placer"), args.step_check):
        if not args.export_only and not os.access(tool, os.X_OK):
            sys.exit(f"model_sweep.py: {tool} is missing: build it first "
                     f"(cmake --build build --target placer onnx_step_check)")
    os.makedirs(args.out, exist_ok=True)
    results = os.path.join(args.out, "results.csv")
    rows = read_rows(results)
    done = {(r["library"], r["model"]) for r in rows}
    todo = [c for c in chosen if (c["library"], c["model"]) not in done]
    print(f"model_sweep.py: {len(chosen)} models, {len(chosen) - len(todo)} already swept",
          file=sys.stderr)
    if args.export_only:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for row in pool.map(lambda c: sweep_one(c, args), todo):
                print(f"{row['library']} {row['model']} ({row['export_s']} s): "
                      f"{row['exported']} {row['error'][:150]}", file=sys.stderr)
        return
    lock = threading.Lock()
    new_file = not os.path.exists(results)
    with open(results, "a", newline="") as f, \
            concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if new_file:
            writer.writeheader()
        futures = {pool.submit(sweep_one, c, args): c for c in todo}
        for k, future in enumerate(concurrent.futures.as_completed(futures), 1):
            row = future.result()
            with lock:
                writer.writerow(row)
                f.flush()
                rows.append(row)
            status = "ok" if passed(row) else f"{row['stage']}: {row['error'][:150]}"
            print(f"[{k}/{len(todo)}] {row['library']} {row['model']} ({seconds(row):.0f} s): "
                  f"{status}", file=sys.stderr)
    chosen_keys = {(c["library"], c["model"]) for c in chosen}
    mine = [r for r in rows if (r["library"], r["model"]) in chosen_keys]
    write_table(mine, os.path.join(args.out, "table.md"))
    write_summary(mine, os.path.join(args.out, "summary.md"), " ".join(sys.argv))
    print(f"model_sweep.py: wrote {args.out}/results.csv, table.md, summary.md", file=sys.stderr)


if __name__ == "__main__":
    main()
