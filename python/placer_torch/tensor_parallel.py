"""A tensor-parallel placement (`tensor_ways: T`) as PyTorch's tensor-parallel plan.

placer splits a replica Megatron-LM's way (graph/tensor_parallel.h): a Linear layer whose input is
whole starts a column split (shard s owns O/T rows of its weight: PyTorch's ColwiseParallel), the
split follows pointwise ops, reshapes and attention's matmuls over heads, and the Linear layer
that contracts over the split features runs row-parallel (shard s owns the matching K/T columns:
RowwiseParallel), its T partial products summed. The file names what each op became:

    tp<s>/<op>                      shard s's copy of a split op (column, follower or row),
                                    or of an op every shard repeats on the whole (a LayerNorm
                                    after a row-parallel all-reduce)
    tp<s>/<op>/allreduce/<step>     the ring all-reduce of row-parallel <op>'s partial products
    tp<s>/<op>/tp_bias              its bias, added after that sum
    <op>, <op>/tp_sum               the sum of row-parallel <op>'s products onto one device
    <tensor>/tp_gather, /tp_scatter<axis>, tp<s>/<tensor>/tp_slice<axis>
                                    a split tensor gathered, a whole one cut for split ops

so a split Linear is row-parallel when its products are summed (an all-reduce on its shards, or
a whole sum beside them), column-parallel otherwise (Megatron's pairs, graph::MegatronColumnStarts;
a Linear that follows a split on another axis than its features would be taken as one too, the
names do not tell it apart). In the file's order (placer's topological order) the shards hold
slices after a column-parallel layer and the whole after a row-parallel sum: a module with
parameters of its own whose op comes in between must be an nn.Linear; after the sum it is one
every shard repeats. Everything else of the model every shard repeats on its own copy, as
Megatron's ranks do (placer runs the ops no split reaches once, on the device the file gives
them). What PyTorch's plans cannot express is refused, naming the op: a split op of a module
that holds parameters and is no nn.Linear where a column split starts or the shards hold slices,
partial products summed outside an nn.Linear, a gather, scatter or slice (a split that is not a
column/row pair), a shard whose ops sit on several devices.
"""

import re
from dataclasses import dataclass, field

import torch

from .module_map import LOSS_OPS, op_site
from .placement_file import SHARD, PlacementError

_ALL_REDUCE = re.compile(r"^(.*)/allreduce/[^/]+$", re.DOTALL)
_SLICE = re.compile(r"^(.*)/tp_slice\d+$", re.DOTALL)
_GATHER_OR_SCATTER = re.compile(r"^(.*)/(tp_gather|tp_scatter\d+)$", re.DOTALL)
# Any other piece the split adds (its ops' last part "tp_..."): one this reading does not know.
_PIECE = re.compile(r"/tp_[a-z_]*\d*$")


def _refuse_piece(op, where):
    raise PlacementError(
        f"{where}: op '{op}' is a piece of the split that placer_torch does not know (it is "
        "not a column/row pair's shard, all-reduce, bias or sum), so it cannot say which of "
        "PyTorch's ColwiseParallel and RowwiseParallel plans expresses it")


@dataclass
class TensorParallelLayout:
    """How one replica of a file is split."""

    ways: int
    column: dict = field(default_factory=dict)  # nn.Linear module name -> an op of its shards
    row: dict = field(default_factory=dict)     # nn.Linear module name -> an op of its shards
    shard_devices: list = field(default_factory=list)  # per shard: the device of its ops
    # Modules with parameters that every shard repeats on the whole (a LayerNorm after a
    # row-parallel sum), as Megatron's ranks repeat them.
    repeated: set = field(default_factory=set)

    def plan(self):
        """{module name: ColwiseParallel() or RowwiseParallel()} for parallelize_module."""
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
        plan = {name: ColwiseParallel() for name in self.column}
        plan.update({name: RowwiseParallel() for name in self.row})
        return plan


def _module_of(op, modules, where):
    """The module whose code runs op `op` ("" for the model) and its depth of scopes, or None
    for a constant."""
    site = op_site(op, modules)
    if site is None:
        raise PlacementError(
            f"{where}: op '{op}' cannot be mapped to a module of the model: placer_torch applies "
            "placements of models loaded from torch.onnx.export files")
    if site.constant:
        return None
    return (site.scope[-1][0] if site.scope else ""), len(site.scope)


# The ONNX types of a linear layer (graph::shard_rules::IsLinearLayer), the only ops that start a
# split; the ops every shard repeats are others (pointwise ops, normalisation, reshapes).
_LINEAR_TYPES = ("Gemm", "MatMul")


def _op_type(op, depth):
    """The ONNX type of op `op` `depth` module scopes deep: the name's part after them
    (/block1/fc1/Gemm -> Gemm), without its call suffix."""
    parts = op.lstrip("/").split("/")
    return re.sub(r"_\d+$", "", parts[min(depth, len(parts) - 1)])


def _holds_parameters(module):
    return any(True for _ in module.parameters(recurse=False))


def read_layout(ops, modules, ways, where):
    """The split of one replica's ops (op name -> device, replica prefix removed) over the
    model's `modules` (name -> module). Raises PlacementError naming the op it cannot map."""
    split, summed = {}, set()  # split op -> {shard: device}; ops whose products are summed
    whole = set()
    for name, device in ops.items():
        shard = SHARD.match(name)
        if shard is None:
            cut = _GATHER_OR_SCATTER.match(name)
            if cut is not None:
                what = "gathers" if cut.group(2) == "tp_gather" else "scatters"
                raise PlacementError(
                    f"{where}: op '{name}' {what} tensor '{cut.group(1)}' of a split: a split "
                    "that is not a column/row pair of Linear layers, which PyTorch's "
                    "ColwiseParallel and RowwiseParallel do not express")
            if name.endswith("/tp_sum"):
                summed.add(name[:-len("/tp_sum")])
            elif _PIECE.search(name):
                _refuse_piece(name, where)
            else:
                whole.add(name)
            continue
        s, base = int(shard.group(1)), shard.group(2)
        reduce = _ALL_REDUCE.match(base)
        if reduce is not None:
            summed.add(reduce.group(1))
            base = reduce.group(1)
        elif base.endswith("/tp_bias"):
            base = base[:-len("/tp_bias")]
        elif _SLICE.match(base):
            raise PlacementError(
                f"{where}: op 'tp{s}/{base}' slices tensor '{_SLICE.match(base).group(1)}' that "
                "every shard holds whole, for a split op: a split that is not a column/row pair "
                "of Linear layers, which PyTorch's ColwiseParallel and RowwiseParallel do not "
                "express")
        elif _PIECE.search(base):
            _refuse_piece(f"tp{s}/{base}", where)
        split.setdefault(base, {})[s] = device
    # A row-parallel op summed onto one device keeps its name for the sum (graph::Sharder).
    summed |= whole & set(split)

    layout = TensorParallelLayout(ways=ways)
    devices = [set() for _ in range(ways)]
    # In the file's order (placer's topological order): after a column-parallel layer the shards
    # hold slices, after a row-parallel one's sum every shard the whole.
    sliced = False
    for op, shards in split.items():
        for s, device in shards.items():
            devices[s].add(device)
        if op in LOSS_OPS:
            continue
        found = _module_of(op, modules, where)
        if found is None:
            continue
        name, depth = found
        module, described = modules[name], f"module '{name or 'the model'}'"
        if isinstance(module, torch.nn.Linear):
            kind, other = (layout.row, layout.column) if op in summed else (layout.column,
                                                                            layout.row)
            if name in other:
                raise PlacementError(
                    f"{where}: {described} is split both column-wise (op '{other[name]}') "
                    f"and row-wise (op '{op}'); a Linear layer is one or the other")
            kind.setdefault(name, op)
            sliced = op not in summed
        elif op in summed:
            raise PlacementError(
                f"{where}: op '{op}' sums partial products over the {ways} shards, and "
                f"{described} ({type(module).__name__}) is no nn.Linear: PyTorch's "
                "RowwiseParallel sums those of nn.Linear layers only")
        elif _op_type(op, depth) in _LINEAR_TYPES:
            raise PlacementError(
                f"{where}: op '{op}' starts a column split, and {described} "
                f"({type(module).__name__}) is no nn.Linear: PyTorch's ColwiseParallel shards "
                "nn.Linear layers only")
        elif _holds_parameters(module):
            if sliced:
                raise PlacementError(
                    f"{where}: op '{op}' runs on the shards' slices, and {described} "
                    f"({type(module).__name__}) holds parameters but is no nn.Linear: PyTorch's "
                    "ColwiseParallel and RowwiseParallel shard nn.Linear layers only")
            layout.repeated.add(name)
        # Else a follower without parameters (an activation, a reshape, attention's matmuls
        # over heads): it runs on each shard's slice as it is.
    for s, seen in enumerate(devices):
        if len(seen) > 1:
            raise PlacementError(
                f"{where}: shard {s} of the split runs on several devices "
                f"({', '.join(sorted(seen))}); a tensor-parallel rank runs its shard on one")
    if not layout.column and not layout.row:
        raise PlacementError(f"{where}: 'tensor_ways: {ways}', but no Linear layer is split")
    layout.shard_devices = [next(iter(seen), None) for seen in devices]
    return layout
