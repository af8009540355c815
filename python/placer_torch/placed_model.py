"""A torch.nn.Module run under placer's placement.

Every call of a module runs its own code (a layer's computation, a container's functional ops
such as the Add of a residual block) on the device placer chose for the ops of that call; its
parameters and buffers live there. Activations move lazily, when an op on another device reads
them, once per tensor and device, as placer's executor copies them: a torch function mode sees
every op of the forward pass and moves its tensor inputs to the device of the module call it
sits in. Backward ops run where autograd puts them, next to their forward op, as placer's
backward ops do.

With `replicas: R` the model is run R times per step, replica k on its shard of the minibatch
(placer's even split) and on the devices the file gives replica k; every replica reads the same
parameters (copied to its devices with autograd, so that their gradients add up on the
parameters, as DDP's all-reduce does) and its own copy of the buffers, replica 0's being the
module's own (DDP broadcasts rank 0's). The outputs are concatenated on the first replica's loss
device: a loss averaged over the whole minibatch then gives placer's gradients.

With `micro_batches: M` (a pipeline) the minibatch is cut into M equal micro-batches, micro-batch
k run on the devices the file gives it, all of them reading and updating the module's one copy of
the parameters and buffers (BatchNorm normalises each micro-batch, as in placer's micro-batched
step). A plain call runs them one after the other and concatenates the outputs on the loss
device; `step` runs the forward and backward passes in the file's schedule (pipeline_order), one
at a time in this one process: the order bounds the activations held (1F1B), it does not overlap
the stages.

With both (R replicated pipelines), replica r runs its shard (the even split) as M micro-batches
on the devices the file gives replica r's micro-batch k, reading its own copies of the parameters
as replicas do; `step` runs each replica's pipeline in the schedule's order, replica after
replica.
"""

import collections

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .placement_file import PlacementError

_TAG = "_placer_device"  # the placement device an activation was computed on
# Tensor methods that read metadata or convert on request: never a reason to move anything.
_PASSIVE = {
    torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.size, torch.Tensor.dim,
    torch.Tensor.numel, torch.Tensor.stride, torch.Tensor.element_size, torch.Tensor.data_ptr,
    torch.Tensor.is_contiguous, torch.Tensor.is_floating_point, torch.Tensor.is_complex,
    torch.Tensor.get_device, torch.Tensor.__len__, torch.Tensor.__repr__,
    torch.Tensor.__format__, torch.Tensor.__bool__, torch.Tensor.item, torch.Tensor.tolist,
    torch.Tensor.numpy, torch.Tensor.type, torch.Tensor.requires_grad_, torch.Tensor.detach,
}


def _in_place(func):
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.startswith("__")) or name in (
        "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
        "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__",
        "__irshift__", "__imatmul__")


def torch_device(name):
    """placer's device name as a torch.device: every CPU worker (cpu:N) is the one CPU device
    of PyTorch, cuda:N is cuda:N."""
    kind, _, index = name.partition(":")
    if kind == "cpu":
        return torch.device("cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise PlacementError(f"device '{name}' is no torch device") from None


def even_shards(batch, replicas):
    """placer's split of a minibatch over equal replicas (graph::SplitBatch): batch // R rows
    each, the remainder on the last replicas."""
    if batch < replicas:
        raise ValueError(f"a minibatch of {batch} rows cannot be split over {replicas} replicas")
    base, extra = divmod(batch, replicas)
    return [base + (1 if k >= replicas - extra else 0) for k in range(replicas)]


def _rows(tree):
    """The rows of the first tensor of `tree` that has any (the minibatch's); None for none."""
    for x in tree_flatten(tree)[0]:
        if isinstance(x, torch.Tensor) and x.dim() > 0:
            return x.shape[0]
    return None


def pipeline_order(schedule, micro_batches, stages):
    """The forward ("F", k) and backward ("B", k) passes of one pipelined step, in the order
    placer's first stage runs them (graph/pipeline.h), which is the order that bounds a
    single-process run too. GPipe: every forward, then every backward. 1F1B (PipeDream-flush, as
    torch.distributed.pipelining's Schedule1F1B for stage 0): at most `stages` micro-batches
    between their forward and their backward, so `stages` forwards to warm up, then one backward
    and one forward in turn, then the backwards left."""
    if schedule == "gpipe":
        return [("F", k) for k in range(micro_batches)] + [("B", k) for k in range(micro_batches)]
    warm_up = min(stages, micro_batches)
    order = [("F", k) for k in range(warm_up)]
    for k in range(warm_up, micro_batches):
        order += [("B", k - warm_up), ("F", k)]
    return order + [("B", k) for k in range(micro_batches - warm_up, micro_batches)]


class _Frame:
    __slots__ = ("module", "scope", "device", "calls")

    def __init__(self, module, scope, device):
        self.module = module
        self.scope = scope
        self.device = device  # placement device of this call's own ops; None: none of its own
        self.calls = collections.Counter()  # submodule name -> calls so far in this call


class _OwnCode(TorchFunctionMode):
    """Runs every op on the device of the module call whose code issues it."""

    def __init__(self, placed):
        super().__init__()
        self.placed = placed

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        stack = self.placed._stack
        frame = stack[-1] if stack else None
        if (frame is None or frame.device is None or func in _PASSIVE
                or getattr(func, "__name__", "") == "__get__"):
            return func(*args, **kwargs)
        target = frame.device
        changed = kwargs.get("out") if isinstance(kwargs.get("out"), torch.Tensor) else None
        if changed is None and _in_place(func) and args and isinstance(args[0], torch.Tensor):
            changed = args[0]
        if changed is not None:
            # An in-place op runs where the tensor it changes is; the others come to it.
            target = getattr(changed, _TAG, target)
            if self.placed._torch[target] != changed.device:
                target = None
        if target is not None:
            args, kwargs = self.placed._move((args, kwargs), target)
        out = func(*args, **kwargs)
        if target is not None:
            self.placed._tag(out, target)
        return out


class PlacedModel(torch.nn.Module):
    """The model of `module` (kept as `.module`, like DDP) placed as a placer file says; built
    by placer_torch.apply."""

    def __init__(self, module, placement, plans, torch_devices, module_devices):
        super().__init__()
        self.module = module
        self.placement = placement  # the PlacementFile
        self._plans = plans  # per replica, or per micro-batch
        self._torch = torch_devices  # placement device -> torch.device
        # Per replica or micro-batch: module name -> placement device of its parameters and
        # buffers.
        self._module_devices = module_devices
        self._names = {id(m): name for name, m in module.named_modules()}
        self._stack = []
        self._part = None  # the replica or micro-batch being run; None outside forward
        self._copies = {}  # (id(tensor), device) -> (tensor, its copy), within one forward
        # Per forward pass: (from, to) placement devices -> tensors moved, as placer counts its
        # transfers per channel ("host" for the minibatch).
        self.transfers = collections.Counter()
        # The passes the last step ran, in order: [("F", 0), ("F", 1), ("B", 0), ...].
        self.order = []
        # Buffers are state, not activations: they are where their module is.
        for name, sub in module.named_modules():
            if name in module_devices[0]:
                self._tag(list(sub.buffers(recurse=False)), module_devices[0][name])
        self._handles = []
        for sub in module.modules():
            self._handles.append(sub.register_forward_pre_hook(self._enter))
            self._handles.append(sub.register_forward_hook(self._leave, always_call=True))

    @property
    def replicas(self):
        return self.placement.replicas

    @property
    def micro_batches(self):
        return self.placement.micro_batches

    @property
    def stages(self):
        """The pipeline's stage count, as placer counts it: the devices that run ops (replica
        0's, for replicated pipelines: each replica's devices are its own stages)."""
        parts = self.placement.ops
        if self.replicas > 1 and self.micro_batches > 1:
            parts = parts[:self.micro_batches]
        return len({device for ops in parts for device in ops.values()})

    def device_of(self, module_name, replica=0):
        """The placement device where module `module_name` ("" for the model) keeps its
        parameters and runs its own ops in replica (or micro-batch) `replica`; None for a module
        with neither."""
        return self._module_devices[replica].get(module_name)

    @property
    def output_device(self):
        """The torch.device the model's output comes out on (placer's loss device)."""
        device = self._plans[0].loss
        return self._torch[device] if device is not None else None

    def remove(self):
        """Removes the hooks and returns the module; its parameters stay where they are."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return self.module

    # Forward.

    def forward(self, *args, **kwargs):
        self.transfers = collections.Counter()
        if len(self._plans) == 1:
            return self._run(0, self.module, args, kwargs)
        gather = self._plans[0].loss
        outputs = []
        for k, (part_args, part_kwargs) in enumerate(self._split((args, kwargs))):
            out = self._run_part(k, part_args, part_kwargs)
            if gather is None:
                gather = getattr(tree_flatten(out)[0][0], _TAG, None)
            outputs.append(self._move(out, gather) if gather is not None else out)
        return tree_map(lambda *xs: torch.cat(xs), *outputs)

    def step(self, inputs, target, loss_fn):
        """One training step's forward and backward passes, micro-batch by micro-batch in the
        order of the file's schedule (pipeline_order; one micro-batch for a file without);
        returns the minibatch's loss, detached. Records the passes it ran in `self.order`.

        `inputs`: the model's input, or a tuple of them; `target`: what `loss_fn(output, target)`
        compares the output with, row by row. `loss_fn` must average over the rows (PyTorch's
        losses do by default): each micro-batch's loss is divided by M before its backward pass,
        as placer normalises each micro-batch's loss by the whole minibatch (and
        torch.distributed.pipelining's scale_grads divides the gradients after), so that the
        gradients adding up in the parameters' .grad are the minibatch's. Zero them before and
        call optimizer.step() after, as around loss.backward(). (torch.distributed.pipelining
        itself needs a process group per stage; this runs in the caller's one process.)"""
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        self.order = []
        if self.micro_batches == 1:
            parts = [(inputs, target)]  # replicas, if any, run in the one forward
        else:
            rows = [_rows(inputs)] + [_rows(x) for x in tree_flatten(target)[0]]
            if len({n for n in rows if n is not None}) > 1:
                raise ValueError(f"step: the target has {rows[1]} rows, the inputs {rows[0]}: "
                                 "it must have one for every row of the inputs")
            parts = self._split((inputs, target))
        self.transfers = collections.Counter()
        losses, total = {}, 0
        # Replicated pipelines: each replica's M micro-batches in the schedule's order, part
        # r * M + k for replica r's micro-batch k.
        pipelines = self.replicas if self.micro_batches > 1 else 1
        per_pipeline = len(parts) // pipelines
        order = [(kind, r * per_pipeline + k) for r in range(pipelines)
                 for kind, k in pipeline_order(self.placement.schedule, per_pipeline, self.stages)]
        for kind, k in order:
            if kind == "F":
                part_inputs, part_target = parts[k]
                out = self(*part_inputs) if self.micro_batches == 1 else self._run_part(
                    k, part_inputs, {})
                device = tree_flatten(out)[0][0].device
                part_target = tree_map(
                    lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, part_target)
                losses[k] = loss_fn(out, part_target) / len(parts)
            else:
                loss = losses.pop(k)
                loss.backward()
                total = total + loss.detach()
            self.order.append((kind, k))
        return total

    def _split(self, tree):
        """`tree` cut by rows into the parts of the model: replica k's shard (placer's even
        split), or micro-batch k of M equal ones; a tensor of other rows goes whole to each."""
        leaves, spec = tree_flatten(tree)
        rows = _rows(tree)
        if rows is None:
            raise ValueError(f"a placement of {len(self._plans)} replicas or micro-batches needs "
                             "a tensor input to split by rows")
        if self.micro_batches > 1:
            if rows % (self.replicas * self.micro_batches):
                replicas = f"{self.replicas} replicas x " if self.replicas > 1 else ""
                raise PlacementError(
                    f"{self.placement.path}: micro_batches: {replicas}{self.micro_batches} does "
                    f"not divide the minibatch of {rows} rows into equal micro-batches")
            sizes = [rows // (self.replicas * self.micro_batches)] * (
                self.replicas * self.micro_batches)
        else:
            sizes = even_shards(rows, self.replicas)
        pieces = [x.split(sizes) if isinstance(x, torch.Tensor) and x.dim() > 0
                  and x.shape[0] == rows else None for x in leaves]
        return [tree_unflatten([p[k] if p is not None else x for p, x in zip(pieces, leaves)],
                               spec) for k in range(len(sizes))]

    def _run_part(self, k, args, kwargs):
        """Replica k on its own copies of the parameters and buffers, or micro-batch k on the
        module's own (replica 0's micro-batches of replicated pipelines too)."""
        replica = self.placement.replica_of(k)
        if self.micro_batches > 1 and replica == 0:
            return self._run(k, self.module, args, kwargs)
        state = self._replica_state(k, replica)
        return self._run(k, lambda *a, **kw: torch.func.functional_call(
            self.module, state, a, kw), args, kwargs)

    def _run(self, part, call, args, kwargs):
        self._part = part
        self._stack.clear()
        try:
            with _OwnCode(self):
                out = call(*args, **kwargs)
            loss = self._plans[part].loss
            return self._move(out, loss) if loss is not None and self.replicas == 1 else out
        finally:
            self._part = None
            self._stack.clear()
            self._copies.clear()

    def _replica_state(self, k, replica):
        """Part k's parameters and buffers for torch.func.functional_call: the module's own
        parameters, copied (with autograd) to the devices part k runs its modules on, and
        copies of the buffers except replica 0's."""
        devices = self._module_devices[k]
        state = {}
        for owner, sub in self.module.named_modules():
            device = self._torch[devices[owner]] if owner in devices else None
            for name, p in sub.named_parameters(recurse=False):
                if p is not None:
                    state[f"{owner}.{name}" if owner else name] = (
                        p if device is None or p.device == device else p.to(device))
            for name, b in sub.named_buffers(recurse=False):
                if b is not None:
                    target = device or b.device
                    copy = b if replica == 0 and b.device == target else (
                        b.clone() if b.device == target else b.to(target))
                    if owner in devices:
                        self._tag(copy, devices[owner])
                    state[f"{owner}.{name}" if owner else name] = copy
        return state

    # Hooks: which module call is running.

    def _enter(self, module, args):
        if self._part is None:
            return None
        plan = self._plans[self._part]
        name = self._names.get(id(module))
        parent = self._stack[-1] if self._stack else None
        if name is None:  # a module made during forward: it runs as part of its caller
            self._stack.append(_Frame(module, parent.scope if parent else (), None))
            return None
        if parent is None:
            scope = ()
        else:
            scope = parent.scope + ((name, parent.calls[name]),)
            parent.calls[name] += 1
        device = plan.own.get(scope)
        if device is None:
            seen = plan.calls.get(name, set())
            if len(seen) > 1:
                raise PlacementError(
                    f"module '{name}' is called in a way the exported model was not (as "
                    f"{scope}); its calls there ran on {sorted(seen)}, so where this one "
                    "runs is not known")
            # A call the file does not list runs where the module's calls ran, else where its
            # state lives (a module whose parameters another module's code reads).
            device = next(iter(seen), None) or self._module_devices[self._part].get(name)
        self._stack.append(_Frame(module, scope, device))
        return None

    def _leave(self, module, args, output):
        if self._stack and self._stack[-1].module is module:
            self._stack.pop()
        return None

    # Moving and tagging.

    def _tag(self, tree, device):
        for x in tree_flatten(tree)[0]:
            if isinstance(x, torch.Tensor) and not isinstance(x, torch.nn.Parameter):
                try:
                    setattr(x, _TAG, device)
                except (AttributeError, RuntimeError):
                    pass

    def _move(self, tree, device):
        target = self._torch[device]

        def move(x):
            if not isinstance(x, torch.Tensor) or isinstance(x, torch.nn.Parameter):
                return x.to(target) if isinstance(x, torch.Tensor) else x
            source = getattr(x, _TAG, "host")
            if source == device and x.device == target:
                return x
            key = (id(x), device)
            cached = self._copies.get(key)
            if cached is not None and cached[0] is x:
                return cached[1]
            copy = x.to(target)
            if copy is not x:
                self._tag(copy, device)
            self._copies[key] = (x, copy)
            if source != device:
                self.transfers[(source, device)] += 1
            return copy

        return tree_map(move, tree)
