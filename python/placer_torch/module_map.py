"""From placer's op names back to the modules of the torch.nn.Module that was exported.

torch.onnx.export (TorchScript exporter) names every node after the module calls it sits in:
`/layer1/layer1.0/conv1/Conv` is the Conv of `layer1.0.conv1`, called in `layer1.0`, called in
`layer1`. Each scope is the module's name relative to one of the enclosing modules (`layer1.0`
under `layer1`, `conv1` under `layer1.0`); a module called several times in one call of its
parent gets `_1`, `_2`, ... on its second, third call (`relu_1`). The last part is the op type
(`Conv`, `Constant_1`). placer's loader keeps those names for the ops it makes, adding
`/<part>` for ops it splits a node into and `#<n>` to make a name unique, and names the loss it
attaches `loss` (and `loss/flatten`).

A scope is therefore a path of (module name, call index) pairs from the model itself, and every
op belongs to one scope: its module's own code (a layer's computation, or a container's
functional ops such as an Add or a Flatten). Constants are no computation and are left out.
"""

import re
from dataclasses import dataclass, field

from .placement_file import PlacementError

_UNIQUE_SUFFIX = re.compile(r"#\d+$")
_CALL_SUFFIX = re.compile(r"^(.+)_(\d+)$")
# ONNX op types are CamelCase (Conv, BatchNormalization, Constant_1, MatMul).
_OP_TYPE = re.compile(r"^[A-Z][A-Za-z0-9]*(_\d+)?$")
LOSS_OPS = ("loss", "loss/flatten")


@dataclass(frozen=True)
class OpSite:
    scope: tuple  # ((module name, call index), ...) from the model down; () for the model itself
    constant: bool = False


def _ancestors(name):
    """`name` and every module above it, innermost first, down to the model ("")."""
    while name:
        yield name
        name = name.rpartition(".")[0]
    yield ""


def _join(parent, child):
    return f"{parent}.{child}" if parent else child


def _match(part, current, modules):
    """The module that scope `part` names inside `current`, with its call index, or None."""
    for name, call in ((part, 0),) + tuple(
            (m.group(1), int(m.group(2))) for m in [_CALL_SUFFIX.match(part)] if m):
        for base in _ancestors(current):
            candidate = _join(base, name)
            if candidate in modules and (not current or candidate.startswith(current + ".")):
                return candidate, call
    return None


def op_site(op, modules):
    """Where op `op` (a name of placer's file, replica prefix removed) runs in the model, or None
    when the name carries no module path (a name that is not an ONNX node's)."""
    name = _UNIQUE_SUFFIX.sub("", op)
    if not name.startswith("/"):
        # A model built by placer itself names ops as it likes; a name that is a module's
        # ("fc1", "features/3") is taken as that module's own op.
        dotted = name.replace("/", ".")
        return OpSite(scope=((dotted, 0),)) if dotted in modules else None
    parts = name[1:].split("/")
    scope, current = [], ""
    for index, part in enumerate(parts[:-1]):
        found = _match(part, current, modules)
        if found is None:
            if not _OP_TYPE.match(part):
                raise PlacementError(
                    f"op '{op}': '{part}' names no submodule of "
                    f"{'the model' if not current else repr(current)}; was the model exported "
                    "from another version of this module?")
            break
        scope.append(found)
        current = found[0]
    op_part = parts[len(scope)]
    return OpSite(scope=tuple(scope), constant=op_part.startswith("Constant"))


def describe_scope(scope):
    if not scope:
        return "the model itself"
    name, call = scope[-1]
    return f"module '{name}'" + (f" (call {call + 1})" if call else "")


@dataclass
class ReplicaPlan:
    """Where one replica of the model, or one micro-batch of a pipeline, runs."""

    # scope -> the device of the ops of that call of that module (its own code).
    own: dict = field(default_factory=dict)
    # module name ("" for the model) -> the devices its calls run on (every call, in every call
    # of its parents).
    calls: dict = field(default_factory=dict)
    loss: str = None  # the device of the loss placer attached; None when the file has none


def plan_replica(ops, modules, where):
    """Maps every op of one replica or micro-batch (op name -> device) to its scope; raises
    PlacementError, its message starting with `where` (the file and part), naming an op no module
    explains or a call of a module whose own ops sit on several devices."""
    plan = ReplicaPlan()
    devices_of = {}  # scope -> {device: [ops]}
    unmapped = []
    for op, device in ops.items():
        if op in LOSS_OPS:
            if op == "loss":
                plan.loss = device
            continue
        if "::" in op:  # an initializer the loader turned into a constant (onnx::Mul_12)
            continue
        site = op_site(op, modules)
        if site is None:
            unmapped.append(op)
            continue
        if site.constant:
            continue
        devices_of.setdefault(site.scope, {}).setdefault(device, []).append(op)
    if unmapped:
        more = f" and {len(unmapped) - 1} more" if len(unmapped) > 1 else ""
        raise PlacementError(
            f"{where}: op '{unmapped[0]}'{more} cannot be mapped to a module of the model: "
            "placer_torch applies placements of models loaded from torch.onnx.export files "
            "(op names such as /layer1/layer1.0/conv1/Conv)")
    for scope, by_device in devices_of.items():
        if len(by_device) > 1:
            listed = "; ".join(f"{d}: {', '.join(sorted(o)[:3])}" for d, o in by_device.items())
            raise PlacementError(
                f"{where}: {describe_scope(scope)} is split over several devices ({listed}); "
                "placer_torch places whole module calls: group the module's ops "
                "(search.grouping) or place it by hand")
        (device,) = by_device
        plan.own[scope] = device
        plan.calls.setdefault(scope[-1][0] if scope else "", set()).add(device)
    return plan
