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
        self._plans = plans
        self._torch = torch_devices  # placement device -> torch.device
        # Per replica: module name -> placement device of its parameters and buffers.
        self._module_devices = module_devices
        self._names = {id(m): name for name, m in module.named_modules()}
        self._stack = []
        self._replica = None  # the replica being run; None outside forward
        self._copies = {}  # (id(tensor), device) -> (tensor, its copy), within one forward
        # Per forward pass: (from, to) placement devices -> tensors moved, as placer counts its
        # transfers per channel ("host" for the minibatch).
        self.transfers = collections.Counter()
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

    def device_of(self, module_name, replica=0):
        """The placement device where module `module_name` ("" for the model) keeps its
        parameters and runs its own ops in replica `replica`; None for a module with neither."""
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
        if self.replicas == 1:
            return self._run(0, self.module, args, kwargs)
        leaves, spec = tree_flatten((args, kwargs))
        batched = [x for x in leaves if isinstance(x, torch.Tensor) and x.dim() > 0]
        if not batched:
            raise ValueError("a replicated placement needs a tensor input to split by rows")
        shards = even_shards(batched[0].shape[0], self.replicas)
        pieces = [x.split(shards) if isinstance(x, torch.Tensor) and x.dim() > 0
                  and x.shape[0] == batched[0].shape[0] else None for x in leaves]
        gather = self._plans[0].loss
        outputs = []
        for k in range(self.replicas):
            shard_args, shard_kwargs = tree_unflatten(
                [p[k] if p is not None else x for p, x in zip(pieces, leaves)], spec)
            state = self._replica_state(k)
            out = self._run(k, lambda *a, **kw: torch.func.functional_call(
                self.module, state, a, kw), shard_args, shard_kwargs)
            if gather is None:
                gather = getattr(tree_flatten(out)[0][0], _TAG, None)
            outputs.append(self._move(out, gather) if gather is not None else out)
        return tree_map(lambda *xs: torch.cat(xs), *outputs) if len(outputs) > 1 else outputs[0]

    def _run(self, replica, call, args, kwargs):
        self._replica = replica
        self._stack.clear()
        try:
            with _OwnCode(self):
                out = call(*args, **kwargs)
            loss = self._plans[replica].loss
            return self._move(out, loss) if loss is not None and self.replicas == 1 else out
        finally:
            self._replica = None
            self._stack.clear()
            self._copies.clear()

    def _replica_state(self, k):
        """Replica k's parameters and buffers for torch.func.functional_call: the module's own
        parameters, copied (with autograd) to the devices replica k runs its modules on, and
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
                    copy = b if k == 0 and b.device == target else (
                        b.clone() if b.device == target else b.to(target))
                    if owner in devices:
                        self._tag(copy, devices[owner])
                    state[f"{owner}.{name}" if owner else name] = copy
        return state

    # Hooks: which module call is running.

    def _enter(self, module, args):
        if self._replica is None:
            return None
        plan = self._plans[self._replica]
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
            device = next(iter(seen), None) or self._module_devices[self._replica].get(name)
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
