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
import hashlib
import inspect
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

CLASSES = 10  # image classifiers' classes
VOCAB = 99  # transformers' shrunk vocabulary: token-level outputs have VOCAB classes
SEQUENCE = 8  # token inputs' length (seq2seq: source and target)
IMAGE_SIZES = (64,)  # tried first; then the model's minimum and default input size
OPSET = 17  # scripts/onnx_suite.py's T5 fixture's
SAMPLE_SIZES = {"timm": 40, "transformers": 25}

# transformers: the config attributes that size a model, and the small value each gets (as a
# constructor argument, so that what the config derives from them -- layer_types, head_dim of
# some -- follows). Only integer attributes the default config has are set.
SMALL = {
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32,
    "intermediate_size": 64, "d_ff": 64, "n_inner": 64, "ffn_dim": 64, "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64, "hidden_dim": 64,
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2,
    "decoder_layers": 2, "num_decoder_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "d_kv": 8, "attention_head_size": 8,
    "vocab_size": VOCAB, "max_position_embeddings": 64, "n_positions": 64, "n_ctx": 64,
    "embedding_size": 32,
    # mixtures of experts, and DeepSeek's low-rank attention
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "n_shared_experts": 1,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 8, "n_group": 1, "topk_group": 1, "vocab_size_per_layer_input": VOCAB,
    "hidden_size_per_layer_input": 8,
    # vision
    "image_size": 64, "num_channels": 3,
}
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
             "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id")
TRANSFORMERS_TASKS = {  # auto mapping -> how the model is fed and what its output is
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": "causal_lm",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": "masked_lm",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": "seq2seq_lm",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES": "image_classification",
}
# Names that say how large a timm variant is, smallest first: --sample prefers the smallest of a
# family (names without one rank with "base"; then the smallest first number in the name).
SIZE_WORDS = ("atto", "femto", "pico", "nano", "micro", "tiny", "xxs", "xxsmall", "xs", "xsmall",
              "mini", "small", "lite", "s", "b0", "b1", "base", "m", "medium", "b", "large", "l",
              "xl", "huge", "h", "giant", "g")

COLUMNS = ["model", "library", "family", "task", "params", "input", "exported", "loads", "step",
           "f32_vs_f64", "compare", "stage", "cause", "error", "unused", "frozen", "export_s",
           "inspect_s", "step_s", "compare_s"]
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


def stable_hash(text):
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Enumeration and the sample (parent process; nothing is built here)


def timm_candidates():
    import timm

    out = []
    for module in timm.list_modules():
        for name in timm.list_models(module=module):
            out.append({"model": name, "library": "timm", "family": module,
                        "task": "image_classification"})
    return out


def transformers_candidates():
    import transformers.models.auto.modeling_auto as auto

    out, seen = [], set()
    for mapping, task in TRANSFORMERS_TASKS.items():
        for model_type, classes in getattr(auto, mapping).items():
            for cls in classes if isinstance(classes, (list, tuple)) else [classes]:
                if cls in seen:  # BART is both a masked and a seq2seq LM: swept once
                    continue
                seen.add(cls)
                out.append({"model": cls, "library": "transformers", "family": model_type,
                            "task": task})
    return out


def size_rank(name):
    tokens = re.split(r"[_.]", name)
    rank = SIZE_WORDS.index("base")
    for k, word in enumerate(SIZE_WORDS):
        if word in tokens or (len(word) >= 4 and any(t.endswith(word) for t in tokens)):
            rank = k
            break
    number = re.search(r"\d+", name)
    return rank, int(number.group()) if number else 0


def spread_sample(candidates, count):
    """One model per family, families in hash order, until `count`; then round two, and so on."""
    by_family = {}
    for c in candidates:
        by_family.setdefault(c["family"], []).append(c)
    for members in by_family.values():
        members.sort(key=lambda c: (size_rank(c["model"]), stable_hash(c["model"])))
    families = sorted(by_family, key=stable_hash)
    picked = []
    while len(picked) < count and any(by_family.values()):
        for family in families:
            if by_family[family] and len(picked) < count:
                picked.append(by_family[family].pop(0))
    return picked


# ---------------------------------------------------------------------------------------------
# Building and exporting one model (the --export-one child process)


def timm_spec(name, torch, max_params):
    """The suite spec of timm model `name` at the smallest input it runs on."""
    import timm

    cfg = timm.get_pretrained_cfg(name)
    cfg = cfg.to_dict() if cfg is not None else {}
    sizes = list(IMAGE_SIZES)
    for key in ("min_input_size", "input_size"):
        if cfg.get(key):
            sizes.append(int(cfg[key][-1]))
    channels = int(cfg.get("input_size", (3,))[0]) if cfg.get("input_size") else 3
    # Models with a fixed input size take img_size; others reject it, so try both. Dropout and
    # stochastic depth off, as the model suite's (PyTorch's reference step runs without them, and
    # stochastic depth draws its mask with random ops); the few models that do not take these
    # arguments are tried without them.
    off = {"drop_rate": 0.0, "drop_path_rate": 0.0}
    attempts = [({"img_size": s, **off}, s) for s in IMAGE_SIZES]
    attempts += [(off, s) for s in dict.fromkeys(sizes)]
    attempts += [({}, s) for s in dict.fromkeys(sizes)]
    errors = []
    for extra, size in attempts:
        kwargs = dict(pretrained=False, num_classes=CLASSES, **extra)
        try:
            torch.manual_seed(0)
            model = timm.create_model(name, **kwargs)
            params = sum(p.numel() for p in model.parameters())
            if params > max_params:
                return None, f"too large: {params} parameters", params
            model.train()
            with torch.no_grad():
                model(torch.randn(2, channels, size, size))
        except Exception as error:  # noqa: BLE001 -- any failure means: try the next input size
            errors.append(f"{size}: {type(error).__name__}: {first_line(str(error))}")
            continue
        spec = {
            "build": lambda torch, nn: timm.create_model(name, **kwargs),
            "inputs": lambda torch, b: [("images", torch.randn(b, channels, size, size))],
            "classes": CLASSES,
            "opset": OPSET,
        }
        return spec, f"{channels}x{size}x{size}", params
    raise BuildError("; ".join(errors[-2:]))


class BuildError(Exception):
    """PyTorch cannot build or run the model at the sizes tried: not placer's failure."""


def small_config(config_class):
    """`config_class` with SMALL's sizes, dropout off and special tokens inside the vocabulary;
    the configs it holds (a text_config, a vision_config) shrunk alike."""
    from transformers import PretrainedConfig

    default = config_class()
    kwargs = {}
    for key, value in SMALL.items():
        try:
            current = getattr(default, key, None)
        except Exception:  # noqa: BLE001 -- XLNet has no max_position_embeddings, Gemma 4 a
            continue  # head_dim per layer: their getters raise, and their defaults stay
        # Only ever smaller: a default below SMALL's stays, and so does XLNet's -1 ("no limit").
        if isinstance(current, int) and not isinstance(current, bool) and current > value:
            kwargs[key] = value
    heads = getattr(default, "num_heads", None)
    if isinstance(heads, (list, tuple)) and "embed_dim" in kwargs:
        # Swin-like stages: stage i has embed_dim * 2^i channels over heads[i] heads.
        kwargs["embed_dim"] = 8 * heads[0]
    for key, value in vars(default).items():
        # Dropout off (PyTorch's reference step and placer's run without it; transformers drops
        # attention weights with the functional dropout, which no module's eval mode turns off).
        if ("dropout" in key or "drop_prob" in key or "layerdrop" in key
                or "drop_path" in key) and isinstance(value, float):
            kwargs[key] = 0.0
        if isinstance(value, PretrainedConfig):
            kwargs[key] = small_config(type(value)).to_dict()
    # Special token ids inside the shrunk vocabulary (an Embedding's padding_idx must be).
    for k, key in enumerate(TOKEN_IDS):
        value = getattr(default, key, None)
        if isinstance(value, int) and value >= VOCAB:
            kwargs[key] = k % 3
    return config_class(**kwargs)


def wrap(nn, model, names, task):
    """An nn.Module that feeds a transformers model its inputs by name (`names`, in the graph's
    order) and returns one [batch, classes] output, as the T5 fixture does: the logits of the
    image, or of the next token."""
    use_cache = "use_cache" in inspect.signature(model.forward).parameters

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, *inputs):
            kwargs = dict(zip(names, inputs))
            if use_cache:
                kwargs["use_cache"] = False
            logits = self.m(**kwargs).logits
            return logits if task == "image_classification" else logits[:, -1]

    return Wrapper()


def transformers_spec(class_name, model_type, task, torch, max_params):
    import transformers

    try:
        cls = getattr(transformers, class_name)
        config = small_config(cls.config_class)
        if task == "image_classification":
            config.num_labels = CLASSES
        accepts = inspect.signature(cls.forward).parameters
    except Exception as error:  # noqa: BLE001 -- the config or class itself does not build
        raise BuildError(f"{type(error).__name__}: {first_line(str(error))}") from error
    size = getattr(config, "image_size", 64)
    size = size if isinstance(size, int) else 64
    channels = getattr(config, "num_channels", 3)
    if task == "image_classification":
        names = ["pixel_values"]
        inputs = lambda torch, b: [("pixel_values", torch.randn(b, channels, size, size))]  # noqa: E731
        shape, classes = f"{channels}x{size}x{size}", CLASSES
    else:
        # An attention mask as the tokenizer gives one (all ones), where the model takes one:
        # without it, transformers' decoders look for packed sequences with torch.diff, which
        # torch.onnx.export (TorchScript) cannot export. Ids from 3 up: none is a special token
        # (models derive masks or positions from padding).
        names = ["input_ids"] + (["attention_mask"] if "attention_mask" in accepts else [])
        names += ["decoder_input_ids"] if task == "seq2seq_lm" else []

        def inputs(torch, b):
            return [(n, torch.ones(b, SEQUENCE, dtype=torch.int64) if n == "attention_mask"
                     else torch.randint(3, VOCAB, (b, SEQUENCE))) for n in names]

        shape, classes = "+".join(names) + f" [batch, {SEQUENCE}]", VOCAB
    spec = {
        "build": lambda torch, nn: wrap(nn, cls(config), names, task),
        "inputs": inputs, "classes": classes, "opset": OPSET,
    }
    try:
        import torch.nn as nn

        torch.manual_seed(0)
        model = spec["build"](torch, nn)
        params = sum(p.numel() for p in model.parameters())
        if params > max_params:
            return None, f"too large: {params} parameters", params
        model.train()
        with torch.no_grad():
            model(*[t for _, t in inputs(torch, 2)])
    except Exception as error:  # noqa: BLE001
        raise BuildError(f"{type(error).__name__}: {first_line(str(error))}") from error
    return spec, shape, params


def export_one(library, name, family, task, workdir, max_params):
    """Child process: builds, exports and references one model; prints a JSON result."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    import torch.nn as nn
    import onnx
    from onnx import numpy_helper
    import onnx_suite

    torch.set_num_threads(1)
    result = {"exported": "", "error": "", "input": "", "params": ""}
    try:
        if library == "timm":
            spec, shape, params = timm_spec(name, torch, max_params)
        else:
            spec, shape, params = transformers_spec(name, family, task, torch, max_params)
    except BuildError as error:
        result.update(exported="not built", error=str(error))
        return result
    result.update(input=shape, params=params)
    if spec is None:
        result.update(exported="too large", error=shape)
        return result
    # The suite's own export and reference, by registering the spec as scripts/onnx_suite.py's
    # FIXTURES entries are (export() looks the name up there).
    onnx_suite.FIXTURES[name] = spec
    model_path = os.path.join(workdir, "model.onnx")
    try:
        model, spec = onnx_suite.export(name, model_path, torch, nn, dynamic=True)
    except Exception as error:  # noqa: BLE001 -- torch.onnx.export's failure, not placer's
        result.update(exported="export failed",
                      error=f"torch.onnx.export: {type(error).__name__}: {first_line(str(error))}")
        return result
    try:
        onnx_suite.write_reference(model, spec, os.path.join(workdir, "model.reference.onnx"),
                                   torch, nn, onnx, numpy_helper)
    except Exception as error:  # noqa: BLE001 -- PyTorch's own training step failed
        result.update(exported="export failed",
                      error=f"reference step: {type(error).__name__}: {first_line(str(error))}")
        return result
    result["exported"] = "yes"
    # Parameters the step comparison cannot match as it stands: ones the forward never uses (the
    # exporter leaves them out of the graph) and frozen ones (ONNX has no requires_grad: placer
    # trains every float initializer).
    result["unused"] = [n for n, p in model.named_parameters()
                        if p.requires_grad and p.grad is None]
    result["frozen"] = [n for n, p in model.named_parameters() if not p.requires_grad]
    try:
        result["f32_vs_f64"] = round(float32_disagreement(model, spec, torch, nn), 3)
    except Exception as error:  # noqa: BLE001 -- not every model runs in float64
        result["f32_vs_f64"] = f"n/a ({type(error).__name__})"
    return result


def float32_disagreement(model, spec, torch, nn):
    """How far PyTorch's own float32 step is from its float64 step on the reference's weights and
    minibatch, in tests/pytorch_step.h's gradient tolerances (the worst parameter's difference
    over its tolerance). Above 1, the model is ill-conditioned at this size (BatchNorm over a
    batch of 2 at a few pixels makes gradients of thousands): float32 alone, in any order,
    misses the tolerance, so a step that differs from PyTorch's says nothing about placer."""
    import copy
    import onnx_suite

    torch.manual_seed(1)  # write_reference's minibatch
    batch = onnx_suite.REFERENCE_BATCH
    inputs = [t for _, t in spec["inputs"](torch, batch)]
    labels = torch.randint(0, spec["classes"], (batch,))
    grads = {}
    for dtype in (torch.float32, torch.float64):
        m = copy.deepcopy(model).to(dtype)
        m.train()
        for module in m.modules():
            if isinstance(module, (nn.modules.dropout._DropoutNd, nn.MultiheadAttention)):
                module.eval()
        m.zero_grad()
        out = m(*[t.to(dtype) if t.is_floating_point() else t for t in inputs])
        nn.functional.cross_entropy(out.reshape(batch, -1), labels).backward()
        grads[dtype] = {n: p.grad.double().reshape(-1) for n, p in m.named_parameters()
                        if p.grad is not None}
    exact = grads[torch.float64]
    largest = max(g.abs().max().item() for g in exact.values())
    worst = 0.0
    for name, g in exact.items():
        tolerance = 2e-3 * g.abs().max().item() + 1e-5 * largest
        difference = (grads[torch.float32][name] - g).abs().max().item()
        worst = max(worst, difference / tolerance if tolerance > 0 else 0.0)
    return worst


# ---------------------------------------------------------------------------------------------
# Running the stages (parent process)


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return ""


def error_line(output):
    """The line of a placer or onnx_step_check output that says what went wrong."""
    for pattern in (r"error:", r"^mismatch:", r"Traceback|Error|terminate|Aborted"):
        for line in output.splitlines():
            if re.search(pattern, line):
                return line.strip()[:400]
    return first_line(output)


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


def ill_conditioned(row):
    try:
        return float(row["f32_vs_f64"]) > 1
    except ValueError:
        return False


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


def fail(row, stage, prefix, output):
    """Records the first failing stage of a row (later stages' failures are in their columns)."""
    if row["stage"]:
        return
    row["stage"] = stage
    row["error"] = prefix + error_line(output)
    row["cause"] = cause_of(row)


def cause_of(row):
    """The cause a failed row is grouped under."""
    if row["stage"] == "step" and row["step"] == "differs":
        if ill_conditioned(row):
            return ("step differs, but ill-conditioned at this size: PyTorch's own float32 step "
                    "misses the tolerance against its float64 step too")
        if row["frozen"]:
            return "step: placer trains parameters PyTorch freezes (requires_grad=False)"
        if row["unused"]:
            return ("step: PyTorch parameters the forward never uses (not in the ONNX graph, "
                    "the comparison wants them)")
    return normalize(row["error"], row["stage"])


# ---------------------------------------------------------------------------------------------
# Causes: the first error line with what differs from model to model blanked


def normalize(error, stage="export"):
    """The cause of a failure: the error line without file names, node names, numbers, shapes."""
    text = error
    unsupported = re.search(r"unsupported ONNX op types: (.*)", text)
    if unsupported:
        ops = re.findall(r"(?:^|, )([\w:.]+) \(first:", unsupported.group(1))
        return "unsupported op " + ", ".join(ops)
    text = re.sub(r"placer: error: (invalid model: )?", "", text)
    text = re.sub(r"\S+\.onnx: ", "", text)  # the file
    # A node's failure: keep its op type and what went wrong.
    node = re.match(r"node \d+ (?:'[^']*' )?\((\w+)\): (.*)", text)
    if node:
        text = f"{node.group(1)}: {node.group(2)}"
    if stage == "step" and text.startswith("mismatch:"):
        if "gradient norm" in text:
            return "step: a gradient's norm differs from PyTorch's"
        if "gradient differs" in text:
            return "step: a gradient differs from PyTorch's"
        if "loss" in text:
            return "step: the loss differs from PyTorch's"
        if "without a match" in text or "no counterpart" in text:
            return "step: a PyTorch parameter has no counterpart in the ONNX graph"
        text = text[len("mismatch:"):]
    text = re.sub(r"'[^']*'", "'…'", text)  # names
    text = re.sub(r"\[[^\]]*\]", "[…]", text)  # shapes and lists
    text = re.sub(r"-?\b\d+(\.\d+)?(e-?\d+)?\b(?!-D)", "N", text)  # numbers (not "2-D")
    text = re.sub(r"0x[0-9a-f]+", "N", text)
    return (f"{stage}: " if stage in ("step", "compare") else "") + text.strip()[:200]


# ---------------------------------------------------------------------------------------------
# The table and the summary


def read_rows(path):
    """The rows of results.csv; one an older version of this script wrote is rewritten with the
    columns of this one (the new ones empty), so that new rows can be appended to it."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = [{c: row.get(c) or "" for c in COLUMNS} for row in reader]
        header = reader.fieldnames
    if header != COLUMNS:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return rows


def md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_table(rows, path):
    shown = ["model", "library", "family", "params", "input", "exported", "loads", "step",
             "f32_vs_f64", "compare", "error"]
    with open(path, "w") as f:
        f.write("| " + " | ".join(shown) + " |\n|" + " --- |" * len(shown) + "\n")
        for row in sorted(rows, key=lambda r: (r["library"], r["model"])):
            f.write("| " + " | ".join(md_cell(row[c]) for c in shown) + " |\n")


def passed(row):
    return (row["exported"] == "yes" and row["loads"] == "yes" and row["step"] == "equal"
            and row["compare"] == "yes")


def seconds(row):
    return sum(float(row[k]) for k in ("export_s", "inspect_s", "step_s", "compare_s") if row[k])


def library_summary(library, rows):
    exported = [r for r in rows if r["exported"] == "yes"]

    def share(n):
        return f"{n} ({100 * n / len(exported):.0f}%)" if exported else str(n)

    times = [seconds(r) for r in rows]
    lines = [
        f"### {library}: {len(rows)} models",
        "",
        f"- not built at the shrunk size (PyTorch): {sum(r['exported'] == 'not built' for r in rows)}",
        f"- too large (skipped): {sum(r['exported'] == 'too large' for r in rows)}",
        f"- export failed (torch.onnx.export or PyTorch's own step): "
        f"{sum(r['exported'] == 'export failed' for r in rows)}",
        f"- exported: {len(exported)}; of those: load {share(sum(r['loads'] == 'yes' for r in exported))}, "
        f"step equal to PyTorch {share(sum(r['step'] == 'equal' for r in exported))} (of the "
        f"others, ill-conditioned at this size: "
        f"{sum(r['step'] == 'differs' and ill_conditioned(r) for r in exported)}), "
        f"compare ran {share(sum(r['compare'] == 'yes' for r in exported))}, "
        f"all three {share(sum(passed(r) for r in exported))}",
        f"- seconds per model: median {statistics.median(times):.1f}, mean "
        f"{statistics.mean(times):.1f}, max {max(times):.1f}" if times else "",
        "",
    ]
    return lines


def cause_table(title, rows):
    groups = {}
    for row in rows:
        groups.setdefault(row["cause"], []).append(row)
    lines = [f"### {title}", "", "| models | cause | examples | first example's error line |",
             "| ---: | --- | --- | --- |"]
    for cause, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        examples = ", ".join(f"`{r['model']}`" for r in members[:2])
        lines.append(f"| {len(members)} | {md_cell(cause)} | {examples} | "
                     f"{md_cell(members[0]['error'])} |")
    return lines + [""]


def missing_ops(rows):
    """Each unsupported op type with the models it blocks (a model may lack several)."""
    count = {}
    for row in rows:
        if row["cause"].startswith("unsupported op "):
            for op in row["cause"][len("unsupported op "):].split(", "):
                count.setdefault(op, []).append(row["model"])
    lines = ["### Unsupported op types, by models blocked", "", "| models | op | examples |",
             "| ---: | --- | --- |"]
    for op, models in sorted(count.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"| {len(models)} | {op} | {', '.join(models[:3])} |")
    return lines + [""]


def write_summary(rows, path, command):
    for row in rows:  # what normalize() says now, for rows an older run wrote
        if row["stage"]:
            row["cause"] = cause_of(row)
    lines = ["# Model sweep", "", f"Command: `{command}`", ""]
    libraries = sorted({r["library"] for r in rows})
    for library in libraries:
        lines += library_summary(library, [r for r in rows if r["library"] == library])
    ours = [r for r in rows if r["exported"] == "yes" and not passed(r)]
    lines += cause_table("placer's failures by cause (the first failing stage)", ours)
    lines += missing_ops(ours)
    theirs = [r for r in rows if r["exported"] in ("export failed", "not built")]
    lines += cause_table("Not placer's: not built or export failed, by cause", theirs)
    with open(path, "w") as f:
        f.write("\n".join(lines))


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
