#!/usr/bin/env python3
"""The pictures of `placer compare`'s report on every ready config, checked in a real browser.

For each configs/lenet.yaml and configs/compare_*.yaml: a copy of the config (its search budget
cut to --seconds and, unless --with-policy, refinement alone searching: a policy step can take
minutes on a loaded 2-core machine, and the pictures draw whatever placements the rows hold),
`placer compare` into --out/<name>, then
scripts/check_report.py on its report.html (headless Chromium: no console error, the schedule and
the device strip of the learned placement and of the best baseline drawn). One line per config;
exit status 1 when any config fails.

    "$(placer_python)" bench/report_pictures.py [--build build] [--out /tmp/placer_pictures]
                                                [--seconds 10] [--only REGEX] [--with-policy]
"""

import argparse
import os
import re
import subprocess
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_report  # noqa: E402


def ready_configs():
    names = sorted(f for f in os.listdir(os.path.join(ROOT, "configs"))
                   if f == "lenet.yaml" or (f.startswith("compare_") and f.endswith(".yaml")))
    return [(n[:-len(".yaml")], os.path.join(ROOT, "configs", n)) for n in names]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default="/tmp/placer_pictures")
    parser.add_argument("--seconds", type=float, default=10,
                        help="search.max_wall_seconds of every copy")
    parser.add_argument("--only", default=".", help="regex on the config names")
    parser.add_argument("--with-policy", action="store_true",
                        help="search with the policy as the config says")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name, path in ready_configs():
        if not re.search(args.only, name):
            continue
        with open(path) as f:
            config = yaml.safe_load(f)
        config.setdefault("search", {})["max_wall_seconds"] = args.seconds
        if not args.with_policy:
            config["search"]["policy"] = False
        # Paths in the config (an expert file, a profile) stay relative to configs/.
        copy = os.path.join(ROOT, "configs", f".report_pictures_{name}.yaml")
        run_dir = os.path.join(args.out, name)
        with open(copy, "w") as f:
            yaml.safe_dump(config, f)
        start = time.time()
        try:
            result = subprocess.run([os.path.join(args.build, "placer"), "compare", "--config",
                                     copy, "--output", run_dir], capture_output=True, text=True)
        finally:
            os.remove(copy)
        with open(os.path.join(args.out, name + ".log"), "w") as f:
            f.write(result.stdout + result.stderr)
        if result.returncode != 0:
            failed.append(name)
            print(f"{name}: placer compare failed (exit {result.returncode}), see "
                  f"{args.out}/{name}.log", flush=True)
            continue
        problems, summary = check_report.check(
            os.path.join(run_dir, "report.html"), pictures=2,
            screenshot=os.path.join(args.out, name + ".png"))
        if problems:
            failed.append(name)
        print(f"{name}: {'FAILED' if problems else 'passed'} ({time.time() - start:.0f} s): "
              f"{summary}" + "".join(f"\n  problem: {p}" for p in problems), flush=True)
    print(f"\nreports checked: {'all passed' if not failed else 'FAILED: ' + ', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
