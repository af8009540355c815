#!/usr/bin/env python3
"""PyTorch's step time under a placement (placer_torch.apply) beside placer's measurement of the
same placement (`placer evaluate`), on the same devices.

Exports torchvision's SqueezeNet 1.1 (64x64 images, 10 classes) to ONNX, finds a placement with
`placer search` (simulated, refinement only, --seconds) unless --placement is given, measures it
with `placer evaluate --placement` (placer's executor: its median step), then trains the same
module under placer_torch.apply with the user's own loop (forward, cross-entropy, backward, SGD
step; the median of --steps timed steps after --warmup, synchronised where a GPU is), and prints
both. With --devices cpu:0,cuda:0 it is the GPU check of placer_torch; every CPU worker placer
names is PyTorch's one CPU device, so on CPU workers alone PyTorch runs them one after the other.

    "$(placer_python)" bench/placer_torch_step.py [--devices cpu:0,cpu:1] [--batch 64]
        [--threads 1] [--placement FILE] [--out /tmp/placer_torch_step]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torchvision
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import placer_torch  # noqa: E402


def run(args):
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def synchronise(devices):
    if any(d.startswith("cuda") for d in devices):
        torch.cuda.synchronize()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default="/tmp/placer_torch_step")
    parser.add_argument("--devices", default="cpu:0,cpu:1")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1,
                        help="threads of each CPU worker (placer) and of PyTorch's CPU")
    parser.add_argument("--seconds", type=float, default=20, help="search budget")
    parser.add_argument("--placement", help="a placement file to measure instead of searching")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    devices = args.devices.split(",")
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)

    def model():
        torch.manual_seed(0)
        return torchvision.models.squeezenet1_1(num_classes=10)

    onnx = os.path.join(args.out, "squeezenet.onnx")
    m = model().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(2, 3, 64, 64),), onnx, dynamo=False,
                          input_names=["images"], output_names=["logits"],
                          dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
    config = os.path.join(args.out, "config.yaml")
    with open(config, "w") as f:
        yaml.safe_dump({
            "model": {"onnx": onnx, "batch_size": args.batch, "learning_rate": 0.01},
            "devices": [{"name": d, "threads": args.threads} if d.startswith("cpu") else d
                        for d in devices],
            "measurement": {"warmup_steps": args.warmup, "timed_steps": args.steps},
            "search": {"evaluator": "simulated", "max_wall_seconds": args.seconds,
                       "policy": False},
            "output": {"directory": os.path.join(args.out, "run")},
        }, f)
    placement = args.placement
    if placement is None:
        run([os.path.join(args.build, "placer"), "search", "--config", config])
        placement = os.path.join(args.out, "run", "best_placement.yaml")
    evaluated = run([os.path.join(args.build, "placer"), "evaluate", "--config", config,
                     "--placement", placement])
    placer_line = re.search(r"step time: ([0-9.]+) ms \((.*)\)", evaluated)

    placed = placer_torch.apply(model(), placement)
    optimizer = torch.optim.SGD(placed.parameters(), lr=0.01)
    images, labels = torch.randn(args.batch, 3, 64, 64), torch.randint(0, 10, (args.batch,))
    times = []
    for step in range(args.warmup + args.steps):
        synchronise(devices)
        start = time.perf_counter()
        logits = placed(images)
        loss = torch.nn.functional.cross_entropy(logits, labels.to(logits.device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        synchronise(devices)
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    torch_ms = statistics.median(times) * 1e3
    with open(placement) as f:
        described = yaml.safe_load(f)
    print(f"placement: {placement} ({described.get('replicas', 1)} replica(s) on "
          f"{', '.join(described['devices'])}); batch {args.batch}, {args.threads} thread(s) "
          f"per CPU worker and for PyTorch's CPU")
    print(f"placer evaluate (its executor):   {float(placer_line.group(1)):9.2f} ms per step "
          f"({placer_line.group(2)})")
    print(f"PyTorch under placer_torch.apply: {torch_ms:9.2f} ms per step (median of "
          f"{args.steps}; min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f})")
    print(f"activations moved per forward pass: {dict(placed.transfers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
