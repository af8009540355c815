"""What the placer_torch tests share: small models, their ONNX export as a user would make it, and
real placement files of placer (`placer search` on the export, then devices rewritten as a test
needs). PLACER_BINARY names the placer program (CTest sets it)."""

import os
import subprocess
import warnings

import torch
import torch.nn as nn
import yaml


class Block(nn.Module):
    """A residual block: its own code adds the skip (an op of the block itself), and one ReLU
    module is called twice (ONNX scopes relu and relu_1)."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.conv2(self.relu(self.conv1(x)))
        return self.relu(y + x)


class Net(nn.Module):
    """Stem, two residual blocks, two branches concatenated by the model's own code, pooling and
    a classifier; with_norm adds a BatchNorm2d after the stem (folded into the stem's Conv by an
    eval-mode export, so that placer's file has no op of it)."""

    def __init__(self, with_norm=False):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8) if with_norm else nn.Identity()
        self.block1 = Block(8)
        self.block2 = Block(8)
        self.branch_a = nn.Conv2d(8, 4, 1)
        self.branch_b = nn.Conv2d(8, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = self.block2(self.block1(self.norm(self.stem(x))))
        x = torch.cat([self.branch_a(x), self.branch_b(x)], 1)
        return self.head(torch.flatten(self.pool(x), 1))


class MLP(nn.Module):
    """A transformer's MLP block: Megatron's pair, fc1 column-parallel and fc2 row-parallel."""

    def __init__(self, width, hidden):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class SplitNet(nn.Module):
    """Two MLP blocks with residuals, a LayerNorm between them, for tensor-parallel answers: the
    search splits block1 and block2 (the first's sum all-reduced, as it feeds block2's split, the
    second's summed onto one device) and leaves embed, norm and head whole. Wide enough that
    the split's halved work beats its all-reduces, and the weights' gradients too many for data
    parallelism, at a minibatch of 32 (1.2 ms simulated on two CPU workers, data parallelism
    2.4 ms, one worker 1.8 ms)."""

    def __init__(self, features=12, width=128, hidden=1024, classes=10):
        super().__init__()
        self.embed = nn.Linear(features, width)
        self.block1 = MLP(width, hidden)
        self.norm = nn.LayerNorm(width)
        self.block2 = MLP(width, hidden)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.embed(x)
        x = self.norm(x + self.block1(x))
        return self.head(x + self.block2(x))


def placer_binary():
    binary = os.environ.get("PLACER_BINARY")
    if not binary or not os.access(binary, os.X_OK):
        raise RuntimeError("PLACER_BINARY must name the built placer program (CTest sets it)")
    return binary


def export(model, path, example):
    """torch.onnx.export as the README tells users to: TorchScript exporter, batch axis dynamic."""
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), path, dynamo=False, input_names=["images"],
                          output_names=["logits"],
                          dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
    model.train()


def search(onnx, directory, batch, seconds=4, replicas=(1, 2), **settings):
    """`placer search` (simulated, two CPU workers) on `onnx`; the path of its
    best_placement.yaml. Refinement only (policy: false): a policy step can outlast a budget of
    seconds many times over on a loaded 2-core machine, and what the tests need is a file of
    placer's. `settings`: more keys of the config's search section (tensor_ways: [2])."""
    config = os.path.join(directory, "search.yaml")
    with open(config, "w") as f:
        yaml.safe_dump({
            "model": {"onnx": onnx, "batch_size": batch, "learning_rate": 0.1},
            "devices": [{"name": "cpu:0", "threads": 1}, {"name": "cpu:1", "threads": 1}],
            "search": {"evaluator": "simulated", "max_wall_seconds": seconds, "policy": False,
                       "replicas": list(replicas), **settings},
            "output": {"directory": os.path.join(directory, "run")},
        }, f)
    result = subprocess.run([placer_binary(), "search", "--config", config],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"placer search failed:\n{result.stdout}\n{result.stderr}")
    return os.path.join(directory, "run", "best_placement.yaml")


def evaluate(directory, placement):
    """`placer evaluate` of `placement` under the config `search` wrote in `directory`: its
    report (the step, and the copies per channel)."""
    result = subprocess.run([placer_binary(), "evaluate", "--config",
                             os.path.join(directory, "search.yaml"), "--placement", placement],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"placer evaluate failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def base_ops(path):
    """The op names of a placement file, replica prefixes removed, in file order."""
    with open(path) as f:
        data = yaml.safe_load(f)
    names = []
    for name in data["placement"]:
        if data.get("replicas", 1) > 1:
            replica, _, name = name.partition("/")
            if replica != "r0":
                continue
        names.append(name)
    return names


def export_ops(onnx_path):
    """The op names placer gives an export's ops without running placer: the ONNX nodes' names,
    which its loader keeps, and the loss it attaches (placer's own files: `search`)."""
    import onnx  # the project's Python has it; only the tests that do not run placer need it
    return [node.name for node in onnx.load(onnx_path).graph.node] + ["loss"]


def write_placement(path, ops, device_of, replicas=1, devices=("cpu:0", "cpu:1"),
                    micro_batches=1, schedule=None):
    """A placement file over `ops` (base names): device_of(op, k) -> device, k the replica or
    micro-batch (replica r's micro-batch m is part r * M + m with both); a pipeline's ops named
    "m<k>/<op>", a replicated pipeline's "r<r>/m<k>/<op>", as placer names them."""
    placement = {}
    if replicas > 1 and micro_batches > 1:
        for k in range(replicas * micro_batches):
            for op in ops:
                placement[f"r{k // micro_batches}/m{k % micro_batches}/{op}"] = device_of(op, k)
    else:
        parts, prefix = (micro_batches, "m") if micro_batches > 1 else (replicas, "r")
        for k in range(parts):
            for op in ops:
                name = f"{prefix}{k}/{op}" if parts > 1 else op
                placement[name] = device_of(op, k)
    data = {"devices": list(devices)}
    if replicas > 1:
        data["replicas"] = replicas
    if micro_batches != 1:
        data["micro_batches"] = micro_batches
    if schedule is not None:
        data["schedule"] = schedule
    data["placement"] = placement
    with open(path, "w") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    return path
