#!/usr/bin/env python3
"""Measures, with plain PyTorch on one GPU, what the simulator's GPU model predicts (issue 28):
whole training steps of the models the calibration table names, and the kernels the roofline
prices (matrix multiplies by shape, convolutions, memory-bound ops, launch overhead, host copies).

Two CSV files under --out:
  gpu_models.csv   model, precision, batch, median step (ms), spread (min-max), throughput
  gpu_kernels.csv  kind, shape, precision, median seconds, achieved TFLOP/s or GB/s (GEMMs,
                   attention's batched products and convolutions at fp32, tf32, bf16 and fp16)

Steps: forward, loss, backward and a plain SGD update (placer's step), cudnn.benchmark on, the
median of --steps timed steps after --warmup, each step synchronised. Precisions: fp32 (TF32
off), tf32 (TF32 matmuls and convolutions), bf16 and fp16 (torch.autocast; fp16 with a
GradScaler, as AMP trains). Models: torchvision ResNet-50 at 224 pixels and transformers'
BertForQuestionAnswering at BERT-large sizes and sequence 384 (random weights, nothing
downloaded), with PyTorch's default attention (SDPA) and the unfused one that placer's graph
holds ("eager").

    python3 bench/gpu_models.py --out DIR [--quick] [--device cuda]

--quick (tiny sizes, a few steps) checks the script on a CPU in seconds; its numbers mean nothing.
"""

import argparse
import csv
import os
import statistics
import sys
import time

import torch

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def synchronise(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def set_tf32(enabled):
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def autocast_dtype(precision):
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def time_calls(fn, device, warmup, repeats):
    """Median, min and max seconds of fn() over `repeats` synchronised calls after `warmup`."""
    for _ in range(warmup):
        fn()
    synchronise(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronise(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


def time_kernel(fn, device, inner, repeats):
    """Seconds per fn() call, fn run `inner` times back to back between synchronisations (so
    launch gaps overlap with the kernels, as in a training step): the median of `repeats`."""
    fn()
    synchronise(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        synchronise(device)
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


# ---- whole training steps ----


def resnet50(batch, quick, device):
    import torchvision

    model = torchvision.models.resnet50(num_classes=1000).to(device)
    model = model.to(memory_format=torch.channels_last)
    pixels = 32 if quick else 224
    images = torch.randn(batch, 3, pixels, pixels, device=device).to(
        memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)

    def loss():
        return torch.nn.functional.cross_entropy(model(images), labels)

    return model, loss


def bert_large_qa(batch, quick, device, attention):
    import transformers

    if quick:
        sizes = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128)
        sequence = 32
    else:  # BERT-large
        sizes = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                     intermediate_size=4096)
        sequence = 384
    config = transformers.BertConfig(vocab_size=30522, max_position_embeddings=512, **sizes)
    config._attn_implementation = attention
    model = transformers.BertForQuestionAnswering(config).to(device)
    tokens = torch.randint(0, config.vocab_size, (batch, sequence), device=device)
    starts = torch.randint(0, sequence, (batch,), device=device)
    ends = torch.randint(0, sequence, (batch,), device=device)

    def loss():
        return model(input_ids=tokens, start_positions=starts, end_positions=ends).loss

    return model, loss


def step_time(build, precision, device, warmup, steps):
    set_tf32(precision == "tf32")
    model, loss_fn = build()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    dtype = autocast_dtype(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn()
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    result = time_calls(step, device, warmup, steps)
    del model, optimizer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def measure_models(args, device, writer):
    batch_resnet = 4 if args.quick else 256
    batch_bert = 2 if args.quick else 32
    models = [
        ("resnet50", batch_resnet, lambda: resnet50(batch_resnet, args.quick, device)),
        ("bert-large-qa-sdpa", batch_bert,
         lambda: bert_large_qa(batch_bert, args.quick, device, "sdpa")),
        ("bert-large-qa-eager", batch_bert,
         lambda: bert_large_qa(batch_bert, args.quick, device, "eager")),
    ]
    for name, batch, build in models:
        for precision in PRECISIONS:
            if name.endswith("eager") and precision in ("fp16",):
                continue  # bf16 says what the unfused attention costs; fp16 adds nothing
            try:
                median, low, high = step_time(build, precision, device, args.warmup, args.steps)
            except Exception as error:  # noqa: BLE001 - a row that failed says why
                print(f"{name} {precision}: FAILED {error}", flush=True)
                writer.writerow([name, precision, batch, "", "", "", "", str(error)[:200]])
                continue
            throughput = batch / median
            print(f"{name:22s} {precision:5s} batch {batch:4d}: {median * 1e3:9.2f} ms "
                  f"({low * 1e3:.2f}-{high * 1e3:.2f}), {throughput:9.1f} samples/s", flush=True)
            writer.writerow([name, precision, batch, f"{median * 1e3:.3f}", f"{low * 1e3:.3f}",
                             f"{high * 1e3:.3f}", f"{throughput:.1f}", ""])


# ---- kernels ----


def gemm_shapes(quick):
    if quick:
        return [(64, 64, 64), (128, 32, 64)]
    squares = [(n, n, n) for n in (256, 512, 1024, 2048, 4096, 8192)]
    # Transformer-shaped: tokens x hidden x hidden and FFN (BERT-base/large, batch 32 x 128 or
    # 384 tokens), and skinny ones (a small batch's linear layers, an LSTM cell's step).
    transformer = [(4096, 768, 768), (4096, 3072, 768), (4096, 768, 3072),
                   (12288, 1024, 1024), (12288, 4096, 1024), (12288, 1024, 4096)]
    skinny = [(32, 1024, 1024), (64, 4096, 1024), (128, 4096, 4096), (256, 1024, 1024),
              (32, 2048, 8192), (512, 512, 512)]
    return squares + transformer + skinny


def attention_shapes(quick):
    # (batch x heads, queries, keys or head size, inner): BERT-base (32 x 12 heads, sequence 128,
    # head 64) and BERT-large (32 x 16 heads, sequence 384, head 64), scores then context.
    if quick:
        return [(4, 16, 16, 8)]
    return [(384, 128, 128, 64), (384, 128, 64, 128), (512, 384, 384, 64), (512, 384, 64, 384)]


def conv_shapes(quick):
    # (batch, in channels, out channels, spatial, kernel, stride): ResNet-50's kinds of layers
    # at batch 256 (a stem, 3x3 and 1x1 convolutions of its four stages).
    if quick:
        return [(2, 8, 8, 16, 3, 1)]
    return [(256, 3, 64, 224, 7, 2), (256, 64, 64, 56, 3, 1), (256, 64, 256, 56, 1, 1),
            (256, 128, 128, 28, 3, 1), (256, 512, 128, 28, 1, 1), (256, 256, 256, 14, 3, 1),
            (256, 1024, 256, 14, 1, 1), (256, 512, 512, 7, 3, 1), (256, 2048, 512, 7, 1, 1)]


def measure_kernels(args, device, writer):
    repeats = 3 if args.quick else 7

    def row(kind, shape, precision, seconds, work, unit):
        rate = work / seconds / (1e12 if unit == "TFLOP/s" else 1e9)
        print(f"{kind:12s} {shape:28s} {precision:5s} {seconds * 1e6:10.2f} us "
              f"{rate:9.2f} {unit}", flush=True)
        writer.writerow([kind, shape, precision, f"{seconds:.9f}", f"{rate:.3f}", unit])

    for precision in ("fp32", "tf32", "bf16", "fp16"):
        set_tf32(precision == "tf32")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
        for batch, m, n, k in attention_shapes(args.quick):
            # Batched products, as attention's scores (queries x keys, inner: head size) and
            # context (queries x head size, inner: keys) for every sequence and head.
            a = torch.randn(batch, m, k, device=device, dtype=dtype)
            b = torch.randn(batch, k, n, device=device, dtype=dtype)
            flops = 2.0 * batch * m * n * k
            inner = max(1, min(200, int(2e11 / flops)))
            seconds = time_kernel(lambda: torch.bmm(a, b), device, inner, repeats)
            row("bmm", f"{batch}x{m}x{n}x{k}", precision, seconds, flops, "TFLOP/s")
        for m, n, k in gemm_shapes(args.quick):
            a = torch.randn(m, k, device=device, dtype=dtype)
            b = torch.randn(k, n, device=device, dtype=dtype)
            flops = 2.0 * m * n * k
            inner = max(1, min(200, int(2e11 / flops)))  # about 0.2-1 ms of work per timing
            seconds = time_kernel(lambda: a @ b, device, inner, repeats)
            row("gemm", f"{m}x{n}x{k}", precision, seconds, flops, "TFLOP/s")
        for batch, cin, cout, size, kernel, stride in conv_shapes(args.quick):
            conv = torch.nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False).to(
                device=device, dtype=dtype, memory_format=torch.channels_last)
            x = torch.randn(batch, cin, size, size, device=device, dtype=dtype).to(
                memory_format=torch.channels_last)
            out = size // stride
            flops = 2.0 * batch * cout * out * out * cin * kernel * kernel
            with torch.no_grad():
                seconds = time_kernel(lambda: conv(x), device, 5, repeats)
            row("conv2d", f"{batch}x{cin}->{cout}@{size}k{kernel}s{stride}", precision, seconds,
                flops, "TFLOP/s")
    set_tf32(False)

    # Memory-bound ops: bytes read + written per second, fp32 and bf16.
    sizes = (1 << 12, 1 << 16) if args.quick else (1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26,
                                                    1 << 28)
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for elements in sizes:
            x = torch.randn(elements, device=device, dtype=dtype)
            y = torch.randn(elements, device=device, dtype=dtype)
            width = x.element_size()
            inner = max(1, min(500, (1 << 30) // (elements * width)))
            for kind, fn, moved in (("add", lambda: x + y, 3), ("relu", lambda: torch.relu(x), 2),
                                    ("copy", lambda: x.clone(), 2)):
                seconds = time_kernel(fn, device, inner, repeats)
                row(kind, f"{elements}", name, seconds, moved * elements * width, "GB/s")
        rows, cols = (16, 64) if args.quick else (12288, 1024)
        x = torch.randn(rows, cols, device=device, dtype=dtype)
        norm = torch.nn.LayerNorm(cols, device=device, dtype=dtype)
        with torch.no_grad():
            seconds = time_kernel(lambda: norm(x), device, 50, repeats)
        row("layernorm", f"{rows}x{cols}", name, seconds, 2 * rows * cols * x.element_size(),
            "GB/s")
        seconds = time_kernel(lambda: torch.softmax(x, -1), device, 50, repeats)
        row("softmax", f"{rows}x{cols}", name, seconds, 2 * rows * cols * x.element_size(),
            "GB/s")

    # Launch and framework overhead: a one-element add, back to back (the GPU never waits for
    # work, so this is the host's issue rate), and one synchronised add (issue + run + sync).
    tiny = torch.ones(1, device=device)
    seconds = time_kernel(lambda: tiny + tiny, device, 2000, repeats)
    row("launch", "1-element add, back to back", "fp32", seconds, 1, "GB/s")
    seconds = time_calls(lambda: tiny + tiny, device, 10, 200)[0]
    row("launch", "1-element add, synchronised", "fp32", seconds, 1, "GB/s")

    # Host <-> device copies, pinned and pageable.
    if device.type == "cuda":
        for pinned in (True, False):
            for elements in (1 << 18, 1 << 24, 1 << 27):
                host = torch.empty(elements, dtype=torch.float32, pin_memory=pinned)
                gpu = torch.empty(elements, dtype=torch.float32, device=device)
                label = f"{elements * 4}B {'pinned' if pinned else 'pageable'}"
                seconds = time_kernel(lambda: gpu.copy_(host, non_blocking=pinned), device, 5,
                                      repeats)
                row("h2d", label, "fp32", seconds, elements * 4, "GB/s")
                seconds = time_kernel(lambda: host.copy_(gpu, non_blocking=pinned), device, 5,
                                      repeats)
                row("d2h", label, "fp32", seconds, elements * 4, "GB/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--parts", default="models,kernels")
    args = parser.parse_args()
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5)
    args.steps = args.steps if args.steps is not None else (2 if args.quick else 15)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --device cpu --quick to check the script")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}", flush=True)
    parts = args.parts.split(",")
    if "kernels" in parts:
        with open(os.path.join(args.out, "gpu_kernels.csv"), "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["kind", "shape", "precision", "seconds", "rate", "unit"])
            measure_kernels(args, device, writer)
    if "models" in parts:
        with open(os.path.join(args.out, "gpu_models.csv"), "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["model", "precision", "batch", "median_ms", "min_ms", "max_ms",
                             "samples_per_s", "error"])
            measure_models(args, device, writer)


if __name__ == "__main__":
    main()
