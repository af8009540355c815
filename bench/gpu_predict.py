#!/usr/bin/env python3
"""The simulator's one-GPU predictions beside what the GPU check measured on an H200 (issue 28's
validation rows: the whole-model steps of bench/gpu_models.py, which bench/fit_gpu_efficiency.py
never fits to) and beside the published figures issue 28 quotes.

For each model and precision it runs `placer predict --device cuda:0` twice, with
simulation.gpu_efficiency peak and achieved (gpu_kind h200), and prints a Markdown table:
measured (PyTorch, SDPA and unfused attention for BERT), predicted, predicted / measured.
Models: torchvision ResNet-50 (1000 classes, 224 pixels, batch 256; exported to ONNX in training
mode as scripts/onnx_suite.py exports its models, cached in --work) and the zoo's transformer at
BERT-large sizes (24 layers, hidden 1024, 16 heads, FFN 4096, sequence 384, batch 32).

    source scripts/lib.sh && "$(placer_python)" bench/gpu_predict.py
        [--measured bench/measured/h200_2026-12-04] [--work /tmp/placer-gpu-predict]
"""

import argparse
import csv
import os
import re
import subprocess
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
# Issue 28's published H200 figures (per-GPU training throughput with NGC containers): ResNet-50
# at batch 256, TF32 2,259 and AMP 3,079 img/s; BERT-large (SQuAD, sequence 384) at batch 32, TF32
# 181 and FP16 350 seq/s.
PUBLISHED_MS = {("resnet50", "tf32"): 256 / 2259 * 1e3, ("resnet50", "fp16"): 256 / 3079 * 1e3,
                ("bert-large", "tf32"): 32 / 181 * 1e3, ("bert-large", "fp16"): 32 / 350 * 1e3}


def export_resnet50(path):
    if os.path.exists(path):
        return
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None, num_classes=1000).train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 3, 224, 224),), path, dynamo=False,
                          opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["images"],
                          output_names=["logits"],
                          dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})


def predict(placer, work, name, model_yaml, precision, efficiency):
    config = os.path.join(work, f"{name}_{precision}_{efficiency}.yaml")
    with open(config, "w") as file:
        file.write(f"{model_yaml}\ndevices: [cuda:0]\nsearch:\n  evaluator: simulated\n"
                   f"simulation:\n  gpu_kind: h200\n  precision: {precision}\n"
                   f"  gpu_efficiency: {efficiency}\n")
    result = subprocess.run([placer, "predict", "--config", config, "--device", "cuda:0"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"placer predict --config {config} failed:\n{result.stdout}{result.stderr}")
    return float(re.search(r"predicted step time: ([0-9.]+) ms", result.stdout).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", default=os.path.join(ROOT, "bench", "measured",
                                                           "h200_2026-12-04"))
    parser.add_argument("--work", default="/tmp/placer-gpu-predict")
    parser.add_argument("--placer", default=os.path.join(ROOT, "build", "placer"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    resnet = os.path.join(args.work, "resnet50_224.onnx")
    export_resnet50(resnet)
    with open(os.path.join(args.measured, "gpu_models.csv")) as file:
        measured = {(r["model"], r["precision"]): float(r["median_ms"])
                    for r in csv.DictReader(file) if r["median_ms"]}
    models = [
        ("resnet50", f"model:\n  onnx: {resnet}\n  batch_size: 256", ["resnet50"]),
        ("bert-large", "model:\n  builtin: transformer\n  batch_size: 32\n  transformer: "
         "{seq_length: 384, layers: 24, hidden: 1024, heads: 16, ffn: 4096}",
         ["bert-large-qa-sdpa", "bert-large-qa-eager"]),
    ]
    print("| model (batch) | precision | measured, PyTorch (ms) | published (ms) | peak (ms) | "
          "achieved (ms) | peak / measured | achieved / measured |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios = []
    for name, model_yaml, measured_names in models:
        for precision in PRECISIONS:
            peak = predict(args.placer, args.work, name, model_yaml, precision, "peak")
            achieved = predict(args.placer, args.work, name, model_yaml, precision, "achieved")
            for measured_name in measured_names:
                value = measured.get((measured_name, precision))
                if value is None:
                    continue
                published = PUBLISHED_MS.get((name, precision))
                ratios.append((measured_name, precision, achieved / value))
                print(f"| {measured_name} | {precision} | {value:.1f} | "
                      f"{f'{published:.1f}' if published else '—'} | {peak:.1f} | "
                      f"{achieved:.1f} | {peak / value:.2f} | {achieved / value:.2f} |")
    errors = sorted(abs(r - 1) for _, _, r in ratios)
    inside = sum(0.8 <= r <= 1.25 for _, _, r in ratios)
    print(f"\nachieved / measured: {inside} of {len(ratios)} rows within [0.8, 1.25], median "
          f"|error| {errors[len(errors) // 2]:.1%}")


if __name__ == "__main__":
    main()
