#!/usr/bin/env python3
"""Exports PyTorch models to ONNX for placer's examples and tests.

Run it with the project's Python (scripts/lib.sh: placer_python), which scripts/setup.sh provides
with torch, torchvision, onnx and transformers:

    source scripts/lib.sh && "$(placer_python)" scripts/export_onnx.py --out DIR [MODEL ...]
    source scripts/lib.sh && "$(placer_python)" scripts/export_onnx.py --suite --out DIR [MODEL ...]

Every export has a dynamic batch axis (dynamic_axes={input: {0: "batch"}}), so that placer can load
it with any batch; --static-batch exports with the batch of the example input fixed instead, as
torch.onnx.export does without dynamic_axes (placer then takes only that batch when the export
baked it into shape constants).

Fixtures (the default): for each model it writes into DIR
  <model>.onnx         the model (TorchScript-based exporter)
  <model>.input.pb     an input minibatch (ONNX TensorProto, named after the graph input)
  <model>.output.pb    PyTorch's own output for that input (to compare the loader's forward with)
and lenet_stripped.onnx, the LeNet with every initializer's data removed (dims kept), which the
loader initialises itself. Models: lenet (the d2l LeNet of graph::BuildLeNet, same layer names),
resnet18 (torchvision, eval mode: the exporter folds BatchNorm into the convolutions), transformer
(token embedding, nn.TransformerEncoder of 2 layers, mean over the sequence, linear classifier),
lstm (2-layer bidirectional nn.LSTM on float sequences, classifier on the last step),
transformer_static (the transformer with its batch of 4 fixed, and baked into Reshape constants by
the exporter) and towers (4 independent MLP towers of 4 x Linear 1024 + ReLU and a classifier each,
on one shared input of 1024 features, their logits summed; 16.8 M parameters, 67 MB).
t5 (transformers' T5ForConditionalGeneration from a small T5Config with random weights, nothing
downloaded) is exported as the model suite's models are (below: in training mode, opset 17) and
written as
  t5.onnx              the model, inputs source [batch, 7] and target [batch, 5] (token ids)
  t5.reference.onnx    PyTorch's own training step on a fixed minibatch (scripts/onnx_suite.py)
conv1d (1-D convolutions: padded, strided, dilated, grouped, depthwise causal, padding='same' of
an even kernel, transposed; input sequence [batch, 4, 16]) is exported and written the same way.
bench/search_suite.py places resnet18, transformer and towers on simulated GPUs.
Weights are random with a fixed seed; every parameter and buffer is perturbed so that no two are
equal (the exporter would merge equal initializers). The reference minibatch has another batch size
than the export, so that loading it exercises the dynamic batch axis.

--suite: the model suite (scripts/onnx_suite.py says how each is exported and what its
<model>.reference.onnx holds): torchvision's resnet18, resnet50, vgg11, densenet121, googlenet,
inception_v3, mobilenet_v2, mobilenet_v3_small, efficientnet_b0, shufflenet_v2_x1_0,
squeezenet1_1, regnet_y_400mf, convnext_tiny and vit_b_16, a torch.nn.Transformer
encoder-decoder (transformer_seq2seq), and LSTM and GRU language models (lstm_lm, gru_lm).

Re-running is cheap: a stamp per model records the scripts and package versions it was written
with, and nothing is redone while it matches.
"""

import argparse
import hashlib
import importlib.metadata
import json
import os
import sys
import warnings

MODELS = ("lenet", "resnet18", "transformer", "lstm", "transformer_static", "towers", "t5",
          "conv1d")
# towers: TOWERS independent MLPs of TOWER_LAYERS x (Linear TOWER_WIDTH + ReLU) and a classifier
# each, all reading the same input, their logits summed. Its best placement is plain (one tower per
# device), and data parallelism pays for all-reducing its 16.8 M parameters: bench/search_suite.py
# places it on simulated 4- and 8-GPU machines.
TOWERS = 4
TOWER_LAYERS = 4
TOWER_WIDTH = 1024
STATIC_BATCH = 4  # transformer_static's
EXPORT_BATCH = 2
REFERENCE_BATCH = 3


def build(name, torch, nn):
    """The module, an example input and the input's name."""
    if name == "lenet":

        class LeNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(1, 20, 3)
                self.pool1 = nn.AvgPool2d(2, 2)
                self.conv2 = nn.Conv2d(20, 50, 5)
                self.pool2 = nn.AvgPool2d(2, 2)
                self.fc1 = nn.Linear(50 * 4 * 4, 128)
                self.fc2 = nn.Linear(128, 10)

            def forward(self, x):
                x = self.pool1(torch.relu(self.conv1(x)))
                x = self.pool2(torch.relu(self.conv2(x)))
                x = torch.flatten(x, 1)
                return self.fc2(torch.relu(self.fc1(x)))

        return LeNet(), lambda b: torch.randn(b, 1, 28, 28), "images"
    if name == "resnet18":
        import torchvision

        return (
            torchvision.models.resnet18(weights=None, num_classes=10),
            lambda b: torch.randn(b, 3, 64, 64),
            "images",
        )
    if name in ("transformer", "transformer_static"):

        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(50, 32)
                layer = nn.TransformerEncoderLayer(
                    32, 4, dim_feedforward=64, dropout=0.0, batch_first=True
                )
                self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
                self.head = nn.Linear(32, 5)

            def forward(self, tokens):
                return self.head(self.encoder(self.embed(tokens)).mean(dim=1))

        return Encoder(), lambda b: torch.randint(0, 50, (b, 7)), "tokens"
    if name == "lstm":

        class Tagger(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=True)
                self.head = nn.Linear(32, 4)

            def forward(self, x):
                y, _ = self.lstm(x)
                return self.head(y[:, -1])

        return Tagger(), lambda b: torch.randn(b, 5, 8), "sequence"
    if name == "towers":

        class Towers(nn.Module):
            def __init__(self):
                super().__init__()
                self.towers = nn.ModuleList(
                    nn.Sequential(
                        *[m for _ in range(TOWER_LAYERS)
                          for m in (nn.Linear(TOWER_WIDTH, TOWER_WIDTH), nn.ReLU())],
                        nn.Linear(TOWER_WIDTH, 10),
                    )
                    for _ in range(TOWERS)
                )

            def forward(self, x):
                logits = self.towers[0](x)
                for tower in self.towers[1:]:
                    logits = logits + tower(x)
                return logits

        return Towers(), lambda b: torch.randn(b, TOWER_WIDTH), "features"
    raise ValueError(name)


def export(name, out, torch, nn, onnx, numpy_helper, dynamic=True):
    torch.manual_seed(0)
    model, make_input, input_name = build(name, torch, nn)
    with torch.no_grad():
        # Distinct values everywhere (see the module docstring); BatchNorm statistics away from
        # 0 and 1 so that folding them into the convolutions is really exercised.
        for tensor in list(model.parameters()) + list(model.buffers()):
            if tensor.is_floating_point():
                tensor.add_(0.05 * torch.randn_like(tensor))
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_var.uniform_(0.5, 1.5)
    model.eval()
    dynamic = dynamic and name != "transformer_static"
    example = make_input(EXPORT_BATCH if dynamic else STATIC_BATCH)
    path = os.path.join(out, name + ".onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (example,),
            path,
            dynamo=False,
            input_names=[input_name],
            output_names=["logits"],
            dynamic_axes={input_name: {0: "batch"}, "logits": {0: "batch"}} if dynamic else None,
        )
    reference = make_input(REFERENCE_BATCH if dynamic else STATIC_BATCH)
    with torch.no_grad():
        expected = model(reference)
    for suffix, tensor, tensor_name in (
        ("input", reference, input_name),
        ("output", expected, "logits"),
    ):
        proto = numpy_helper.from_array(tensor.numpy(), tensor_name)
        with open(os.path.join(out, f"{name}.{suffix}.pb"), "wb") as f:
            f.write(proto.SerializeToString())
    return [path]


def strip(source, target, onnx):
    """A copy of `source` whose initializers keep their dims but lose their data."""
    model = onnx.load(source)
    for initializer in model.graph.initializer:
        if initializer.data_type == onnx.TensorProto.FLOAT:
            initializer.ClearField("raw_data")
            initializer.ClearField("float_data")
    onnx.save(model, target)


def file_hash(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import onnx_suite

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory to write into")
    parser.add_argument("--suite", action="store_true", help="export the model suite")
    parser.add_argument("--static-batch", action="store_true",
                        help="fix the batch axis at the example's (no dynamic_axes)")
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help=f"fixtures: {', '.join(MODELS)}; suite: {', '.join(onnx_suite.SUITE)}")
    args = parser.parse_args()
    known = list(onnx_suite.SUITE) if args.suite else list(MODELS)
    for name in args.models:
        if name not in known:
            parser.error(f"unknown model '{name}'; known: {', '.join(known)}")
    args.models = args.models or known
    setup_hint = (
        "run scripts/setup.sh (it installs torch, torchvision and onnx into the project's Python)"
    )
    try:
        # Read from package metadata: importing torch takes seconds, the up-to-date check must not.
        versions = {p: importlib.metadata.version(p)
                    for p in ("torch", "torchvision", "onnx", "transformers")}
    except importlib.metadata.PackageNotFoundError as error:
        sys.exit(f"export_onnx.py: package {error} is missing; {setup_hint}")
    os.makedirs(args.out, exist_ok=True)
    stamp = {
        "scripts": [file_hash(__file__), file_hash(os.path.join(here, "onnx_suite.py"))],
        "versions": versions,
        "static_batch": args.static_batch,
    }

    def outputs(name):
        if args.suite or name in onnx_suite.FIXTURES:
            return [f"{name}.onnx", f"{name}.reference.onnx"]
        files = [f"{name}.{s}" for s in ("onnx", "input.pb", "output.pb")]
        return files + (["lenet_stripped.onnx"] if name == "lenet" else [])

    def up_to_date(name):
        try:
            with open(os.path.join(args.out, f"{name}.stamp")) as f:
                done = json.load(f)
        except (OSError, ValueError):
            return False
        return done == stamp and all(os.path.exists(os.path.join(args.out, p))
                                     for p in outputs(name))

    todo = [name for name in args.models if not up_to_date(name)]
    if not todo:
        return
    try:
        import torch
        import torch.nn as nn
        import onnx
        from onnx import numpy_helper
    except ImportError as error:
        sys.exit(f"export_onnx.py: {error}; {setup_hint}")
    torch.set_num_threads(1)
    for name in todo:
        if args.suite or name in onnx_suite.FIXTURES:
            model, spec = onnx_suite.export(name, os.path.join(args.out, f"{name}.onnx"), torch,
                                            nn, dynamic=not args.static_batch)
            onnx_suite.write_reference(model, spec,
                                       os.path.join(args.out, f"{name}.reference.onnx"), torch,
                                       nn, onnx, numpy_helper)
        else:
            export(name, args.out, torch, nn, onnx, numpy_helper, dynamic=not args.static_batch)
            if name == "lenet":
                strip(os.path.join(args.out, "lenet.onnx"),
                      os.path.join(args.out, "lenet_stripped.onnx"), onnx)
        with open(os.path.join(args.out, f"{name}.stamp"), "w") as f:
            json.dump(stamp, f)
        print(f"export_onnx.py: wrote {name}.onnx", file=sys.stderr)


if __name__ == "__main__":
    main()
