"""The model sweep's models (bench/model_sweep.py): which of timm's and transformers' architectures
it sweeps, and how each is built with random weights at a small size and exported to ONNX with
PyTorch's own training step as its reference (in the sweep's child process)."""

import hashlib
import inspect
import os
import re
import sys

from sweep_report import first_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
