"""A placement run across the processes torchrun starts (torch.distributed initialised).

Each process runs one part of the file, on the devices the file gives that part:

- replica r on rank r (R processes): as the one-process PlacedModel runs one replica, its
  pipeline's micro-batches too, one after the other in the file's schedule;
- stage p of replica r's pipeline on rank r * S + p (R x S processes): PyTorch's
  torch.distributed.pipelining (pipeline_stages.py);
- shard s of replica r on rank r * T + s (R x T processes, T = tensor_ways): the model's split
  Linear layers as PyTorch's ColwiseParallel/RowwiseParallel over the replica's T ranks (a
  DeviceMesh of R x T, parallelize_module), the rest repeated by every shard
  (tensor_parallel.py).

The replicas' gradients are averaged over the replicas' ranks as DDP averages them (one
all-reduce per device and dtype, after the step's last backward; DDP overlaps its buckets with
the backward), parameters and buffers broadcast from rank 0 at apply and buffers from each
replica group's first rank before every step (DDP's broadcast_buffers), so that BatchNorm keeps
replica 0's statistics as the one-process mode does.

`step(inputs, target, loss_fn)` takes the whole minibatch on every rank and gives the
one-process step: replica r runs its shard of the rows (placer's even split; R x M equal
micro-batches for pipelines) with its loss scaled by R * rows_r / rows, so that the average is
the minibatch's mean loss and gradient whatever the shards' sizes; it returns the minibatch's
loss on every rank. A plain call is DDP's: the input is this rank's own rows, and the backward
averages the gradients over the replicas when it ends.
"""
import dataclasses

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .placed_model import _rows, even_shards
from .placement_file import PlacementError
from .tensor_parallel import read_layout


def in_processes(distributed):
    """Whether apply runs the file across processes: asked (True), refused (False), or by
    default when torch.distributed is initialised with more than one process."""
    initialised = dist.is_available() and dist.is_initialized()
    if distributed is None:
        return initialised and dist.get_world_size() > 1
    if distributed and not initialised:
        raise RuntimeError("apply(distributed=True) needs torch.distributed initialised "
                           "(torchrun, then torch.distributed.init_process_group)")
    return bool(distributed)


def stage_count(placement):
    """The stages of a pipeline, as placer counts them: the devices replica 0's ops run on."""
    return len({d for ops in placement.ops[:placement.micro_batches] for d in ops.values()})


def check_world(placement):
    """This rank's part: ("split", replica, shard), ("stages", replica, stage) or ("replica",
    replica, 0); raises PlacementError naming the file when the processes match no mapping of
    its replicas, shards and stages."""
    world, ways, replicas = dist.get_world_size(), placement.tensor_ways, placement.replicas
    if ways > 1 and placement.micro_batches > 1:
        raise PlacementError(
            f"{placement.path}: 'tensor_ways: {ways}' with 'micro_batches: "
            f"{placement.micro_batches}': placer_torch does not run split pipelines")
    stages = stage_count(placement) if placement.micro_batches > 1 else 1
    if ways > 1:
        kind, per = "split", ways
    elif stages > 1 and world == replicas * stages:
        kind, per = "stages", stages
    else:
        kind, per = "replica", 1
    if world != replicas * per:
        many = "s" if replicas != 1 else ""
        if kind == "split":
            needs = (f"{replicas} replica{many} x {ways} tensor-parallel shards run on "
                     f"{replicas * ways} processes, one each (torchrun --nproc_per_node "
                     f"{replicas * ways})")
        elif stages > 1:
            needs = (f"{replicas} pipeline{many} of {stages} stages run on {replicas} "
                     f"process{'es' if replicas != 1 else ''} (one per pipeline) or on "
                     f"{replicas * stages} (one per stage, torch.distributed.pipelining)")
        else:
            needs = (f"{replicas} replica{many} run on {replicas} "
                     f"process{'es' if replicas != 1 else ''}, one each (torchrun "
                     f"--nproc_per_node {replicas})")
        raise PlacementError(f"{placement.path}: {needs}; torch.distributed has {world}")
    rank = dist.get_rank()
    return kind, rank // per, rank % per


def replica_share(placement, replica):
    """The part of `placement` that replica `replica` runs: its pipeline's micro-batches."""
    m = placement.micro_batches
    return dataclasses.replace(placement, replicas=1, tensor_ways=1, replica=replica,
                               ops=placement.ops[replica * m:(replica + 1) * m])


@torch.no_grad()
def broadcast(tensors, group=None):
    source = dist.get_global_rank(group, 0) if group is not None else 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        dist.broadcast(local.data, src=source, group=group)


def state(module):
    return [p for p in module.parameters()] + [b for b in module.buffers()]


def split_module(model, placement, replica, shard, torch_devices):
    """Parallelizes `model` for shard `shard` of replica `replica` (rank replica * T + shard) on
    the device of that shard's ops (`torch_devices`: placement device -> torch.device); returns
    the split and the process group of the ranks that hold the same shard of every replica."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    layout = read_layout(placement.ops[replica], dict(model.named_modules()),
                         placement.tensor_ways, placement.where(replica))
    device = torch_devices[layout.shard_devices[shard]]
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's communicator for this rank
    mesh = init_device_mesh(device.type, (placement.replicas, placement.tensor_ways),
                            mesh_dim_names=("replica", "shard"))
    model.to(device)
    broadcast(state(model))  # every rank starts from rank 0's model, as DDP does
    parallelize_module(model, mesh["shard"], layout.plan())
    return layout, mesh["replica"].get_group()


def stage_module(model, placement, replica, stage, torch_devices):
    """Stage `stage` of replica `replica`'s pipeline (rank replica * S + stage) on the device of
    its ops; returns its runner and the process group of the ranks that run the same stage of
    every replica."""
    from torch.distributed.device_mesh import init_device_mesh

    from .pipeline_stages import PipelineStageRunner, read_stages

    stages, splits = read_stages(placement, dict(model.named_modules()), replica)
    device = torch_devices[stages[stage]]
    if device.type == "cuda":
        torch.cuda.set_device(device)
    mesh = init_device_mesh(device.type, (placement.replicas, len(stages)),
                            mesh_dim_names=("replica", "stage"))
    broadcast(state(model))  # every rank starts from rank 0's model, as DDP does
    runner = PipelineStageRunner(model, placement, stage, stages, splits, device,
                                 mesh["stage"].get_group())
    return runner, mesh["replica"].get_group()


class DistributedPlacedModel(torch.nn.Module):
    """This process's part of a placement run across processes; built by placer_torch.apply
    when torch.distributed is initialised. `.module` is the model (its split Linear layers'
    parameters DTensors), `.local` what runs this rank's part: the one-process PlacedModel of its
    replica, its pipeline stage (pipeline_stages.PipelineStageRunner), or None for a split."""

    def __init__(self, module, placement, replica, shard, local, group, layout=None,
                 stage=None):
        super().__init__()
        self.module = module
        self.placement = placement
        # This rank's replica, its shard of a split (0 without) and its pipeline stage (None
        # when the replica's whole pipeline runs here).
        self.replica, self.shard, self.stage = replica, shard, stage
        # Not a submodule: its model is .module, which state_dict holds once.
        self.__dict__["local"] = local
        self.layout = layout  # the split (tensor_parallel.TensorParallelLayout), or None
        self._group = group  # the ranks of the other replicas' same shard (None: all)
        self._replicas = placement.replicas
        self._sync_queued = False
        self.order = []  # the passes this rank's last step ran, as PlacedModel.order

    @property
    def replicas(self):
        return self._replicas

    @property
    def micro_batches(self):
        return self.placement.micro_batches

    def forward(self, *args, **kwargs):
        """DDP's call: this rank's own rows; the backward through the output averages the
        replicas' gradients when it ends."""
        self._broadcast_buffers()
        out = self._call(*args, **kwargs)
        if self._replicas > 1 and torch.is_grad_enabled():
            for x in tree_flatten(out)[0]:
                if isinstance(x, torch.Tensor) and x.requires_grad:
                    x.register_hook(self._queue_average)
        return out

    def step(self, inputs, target, loss_fn):
        """The one-process step (PlacedModel.step) across the processes: `inputs` and `target`
        are the whole minibatch, the same on every rank; returns its loss on every rank with
        the minibatch's gradients in every replica's .grad."""
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        rows = _rows(inputs)
        if rows is None:
            raise ValueError("step needs a tensor input to split by rows")
        m = self.micro_batches
        if m > 1:
            if rows % (self._replicas * m):
                raise PlacementError(
                    f"{self.placement.path}: micro_batches: {self._replicas} replicas x {m} does "
                    f"not divide the minibatch of {rows} rows into equal micro-batches")
            sizes = [rows // self._replicas] * self._replicas
        else:
            sizes = even_shards(rows, self._replicas)
        start = sum(sizes[:self.replica])
        part_inputs, part_target = _take((inputs, target), rows, start, sizes[self.replica])
        # Each replica's mean loss scaled so that the replicas' average is the minibatch's.
        scale = self._replicas * sizes[self.replica] / rows

        def scaled(out, tgt):
            return loss_fn(out, tgt) * scale

        self._broadcast_buffers()
        if self.local is not None:
            loss = self.local.step(part_inputs, part_target, scaled)
            self.order = self.local.order
        else:
            out = self._call(*part_inputs)
            device = tree_flatten(out)[0][0].device
            loss = scaled(out, tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor)
                                        else x, part_target))
            loss.backward()
            loss = loss.detach()
            self.order = [("F", 0), ("B", 0)]
        self.average_gradients()
        if self._replicas > 1:
            loss = loss.clone()
            dist.all_reduce(loss, group=self._group)
            loss /= self._replicas
        return loss

    @torch.no_grad()
    def average_gradients(self):
        """Averages every parameter's .grad over the replicas (DDP's all-reduce), one flat
        all-reduce per device and dtype."""
        if self._replicas == 1:
            return
        buckets = {}
        for p in self.module.parameters():
            if p.grad is not None:
                grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                buckets.setdefault((grad.device, grad.dtype), []).append(grad)
        for grads in buckets.values():
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=self._group)
            flat /= self._replicas
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()

    def _call(self, *args, **kwargs):
        return (self.local if self.local is not None else self.module)(*args, **kwargs)

    def _queue_average(self, grad):
        # Once per backward, after its last gradient has been accumulated (as DDP's reducer
        # finalises its buckets).
        if not self._sync_queued:
            self._sync_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)
        return grad

    def _after_backward(self):
        self._sync_queued = False
        self.average_gradients()

    def _broadcast_buffers(self):
        if self._replicas > 1:
            broadcast(list(self.module.buffers()), self._group)


def _take(tree, rows, start, size):
    """Rows start .. start + size of every tensor of `tree` that has `rows` rows."""
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([x.narrow(0, start, size) if isinstance(x, torch.Tensor) and x.dim()
                           and x.shape[0] == rows else x for x in leaves], spec)
