"""placer_torch: run a placement found by placer in your own PyTorch training.

    import placer_torch
    model = placer_torch.apply(model, "runs/x/best_placement.yaml")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)   # after apply
    for images, labels in loader:
        logits = model(images)
        loss = torch.nn.functional.cross_entropy(logits, labels.to(logits.device))
        optimizer.zero_grad(); loss.backward(); optimizer.step()

`model` is the torch.nn.Module that was exported with torch.onnx.export for placer (model.onnx of
the config); apply places it as the file says and returns it wrapped in a PlacedModel (the module
itself is `.module`, as with DDP). See placed_model.py for what runs where.

A pipelined file (`micro_batches: M`) runs the same loop, one micro-batch after another; to run
their forward and backward passes in the file's schedule (GPipe or 1F1B), replace the forward,
loss and backward by `loss = model.step(images, labels, torch.nn.functional.cross_entropy)`; a
file with replicas as well runs each replica's pipeline so, replica after replica.

Under torchrun (torch.distributed initialised, more than one process) apply runs the file across
the processes: replica r on rank r, or each pipeline stage or tensor-parallel shard of a replica
on a rank of its own (distributed.py); `model.step(images, labels, loss_fn)` on the whole
minibatch, the same on every rank, gives the one-process step.
"""

import torch

from . import distributed as distributed_mode
from .distributed import DistributedPlacedModel
from .module_map import plan_replica
from .placed_model import PlacedModel, even_shards, pipeline_order, torch_device
from .placement_file import PlacementError, PlacementFile, read_placement_file

__all__ = ["apply", "PlacedModel", "DistributedPlacedModel", "PlacementError",
           "read_placement_file", "even_shards", "pipeline_order"]


def _torch_devices(placement, device_map):
    devices = {}
    for name in placement.devices:
        target = (device_map or {}).get(name)
        device = torch.device(target) if target is not None else torch_device(name)
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if (device.index or 0) >= count:
                raise PlacementError(
                    f"{placement.path}: device '{name}' is {device}, which this machine does "
                    f"not have ({count} CUDA device{'s' if count != 1 else ''}); "
                    f"device_map={{'{name}': 'cpu'}} runs its part on the CPU instead")
        devices[name] = device
    return devices


def _state_devices(model, plan, default, where):
    """Module name -> placement device for every module with parameters or buffers of its own,
    and every module whose calls all run on one device."""
    devices = {name: next(iter(seen)) for name, seen in plan.calls.items() if len(seen) == 1}
    for name, module in model.named_modules():
        has_state = any(True for _ in module.parameters(recurse=False)) or any(
            True for _ in module.buffers(recurse=False))
        if not has_state:
            continue
        seen = plan.calls.get(name, set())
        if len(seen) > 1:
            raise PlacementError(
                f"{where}: module '{name or 'the model'}' holds parameters and its calls run on "
                f"several devices ({', '.join(sorted(seen))}); a parameter lives on one device")
        if seen:
            continue
        # No op of its own (its parameters are read by an enclosing module's code, as
        # nn.MultiheadAttention reads out_proj's): it lives where the nearest enclosing module
        # with ops of its own runs.
        parent = name
        while parent and parent not in devices:
            parent = parent.rpartition(".")[0]
        if parent in devices:
            devices[name] = devices[parent]
        elif default is not None:
            devices[name] = default
        else:
            raise PlacementError(
                f"{where}: module '{name or 'the model'}' holds parameters but no op of the file "
                "belongs to it or to a module around it (was the model exported in eval mode, "
                "BatchNorm folded away? export with training=torch.onnx.TrainingMode.TRAINING)")
    return devices


def _check_shared(model, devices, where):
    owner = {}
    for name, module in model.named_modules():
        for tensor in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
            first = owner.setdefault(id(tensor), name)
            if first != name and devices.get(first) != devices.get(name):
                raise PlacementError(
                    f"{where}: modules '{first}' ({devices.get(first)}) and '{name}' "
                    f"({devices.get(name)}) share a parameter but are placed apart")


def _check_one_copy(model, devices, first, where):
    """A pipeline's micro-batches read and update one copy of each parameter and buffer (placer
    places every micro-batch's copy of an op together): micro-batch k must keep each module's
    state where micro-batch 0 does."""
    for name, module in model.named_modules():
        if any(True for _ in module.parameters(recurse=False)) or any(
                True for _ in module.buffers(recurse=False)):
            if devices.get(name) != first.get(name):
                raise PlacementError(
                    f"{where}: module '{name or 'the model'}' keeps its parameters on "
                    f"{devices.get(name)}, but on {first.get(name)} in its pipeline's "
                    "micro-batch 0; the micro-batches of a pipeline share one copy of them")


def _move_state(model, devices, torch_devices):
    with torch.no_grad():
        for name, module in model.named_modules():
            if name not in devices:
                continue
            target = torch_devices[devices[name]]
            for p in module.parameters(recurse=False):
                if p.device != target:
                    p.data = p.data.to(target)
                    if p.grad is not None:
                        p.grad = p.grad.to(target)
            for key, b in module._buffers.items():
                if b is not None and b.device != target:
                    module._buffers[key] = b.to(target)


def apply(model, placement, device_map=None, distributed=None):
    """Places `model` (a torch.nn.Module) as `placement` says and returns it as a PlacedModel,
    or, across processes, as this process's DistributedPlacedModel.

    `placement`: a path to a placer placement file (best_placement.yaml) or a PlacementFile.
    `device_map`: optional {placement device: torch device}, e.g. {"cuda:1": "cuda:0"}; by
    default every CPU worker (cpu:N) is PyTorch's CPU and cuda:N is cuda:N.
    `distributed`: run the file across the processes of torch.distributed (replica r on rank r,
    shard s of replica r on rank r * T + s: distributed.py); by default when it is initialised
    with more than one process. A tensor-parallel file runs only so.
    Raises PlacementError naming the op or module that cannot be placed: an op that maps to no
    module, a module call whose ops sit on several devices, parameters needed on two devices,
    a split PyTorch's tensor-parallel plans cannot express, processes that do not match.
    Create the optimizer after apply (parameters keep their identity, but their data moves).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"apply needs a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(placement, PlacementFile):
        placement = read_placement_file(placement)
    if distributed_mode.in_processes(distributed):
        return _apply_across_processes(model, placement, device_map)
    if placement.tensor_ways > 1:
        split = next((op for op in placement.ops[0] if op.startswith("tp1/")), None)
        processes = placement.replicas * placement.tensor_ways
        raise PlacementError(
            f"{placement.path}: 'tensor_ways: {placement.tensor_ways}'"
            + (f" (op '{split}' is shard 1 of a split layer)" if split else "") +
            f": tensor-parallel shards run in processes of their own; start the training with "
            f"torchrun --nproc_per_node {processes} (one process per shard of each replica)")
    return _apply_in_process(model, placement, device_map)


def _apply_in_process(model, placement, device_map):
    modules = dict(model.named_modules())
    plans = [plan_replica(ops, modules, placement.where(k)) for k, ops in enumerate(placement.ops)]
    torch_devices = _torch_devices(placement, device_map)
    module_devices = []
    for k, plan in enumerate(plans):
        devices = _state_devices(model, plan, placement.default, placement.where(k))
        _check_shared(model, devices, placement.where(k))
        if placement.micro_batches > 1 and placement.micro_batch_of(k):
            # A pipeline's micro-batches share their replica's one copy of the parameters.
            _check_one_copy(model, devices, module_devices[k - placement.micro_batch_of(k)],
                            placement.where(k))
        module_devices.append(devices)
    _move_state(model, module_devices[0], torch_devices)
    return PlacedModel(model, placement, plans, torch_devices, module_devices)


def _apply_across_processes(model, placement, device_map):
    kind, replica, index = distributed_mode.check_world(placement)
    if kind == "replica":
        # Rank r: replica r as the one-process mode runs it, on the devices the file gives it.
        local = _apply_in_process(model, distributed_mode.replica_share(placement, replica),
                                  device_map)
        gpus = [p.device for p in model.parameters() if p.device.type == "cuda"]
        if gpus:
            torch.cuda.set_device(gpus[0])  # NCCL's communicator for this rank
        distributed_mode.broadcast(distributed_mode.state(model))  # rank 0's model, as DDP
        return DistributedPlacedModel(model, placement, replica, 0, local, None)
    devices = _torch_devices(placement, device_map)
    if kind == "stages":
        # Rank r * S + p: stage p of replica r's pipeline, on the device of its ops.
        runner, group = distributed_mode.stage_module(model, placement, replica, index, devices)
        return DistributedPlacedModel(model, placement, replica, 0, runner, group, stage=index)
    # Rank r * T + s: shard s of replica r, on the device of its ops.
    layout, group = distributed_mode.split_module(model, placement, replica, index, devices)
    return DistributedPlacedModel(model, placement, replica, index, None, group, layout)
