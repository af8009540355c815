"""A pipeline's stages as processes of their own, run by PyTorch's torch.distributed.pipelining.

placer's pipelined file places every op of micro-batch k on a device; its stages are those
devices in the order the ops use them (placer's stage count). PyTorch's pipelining cuts the
model where a submodule's call begins (SplitPoint.BEGINNING; torch.export traces the model), so
a file maps onto it when each stage after the first starts with the first op of a module call
and the ops never come back to an earlier stage: stage p is then rank p of the replica's S
ranks, and a step is ScheduleGPipe's or Schedule1F1B's, as the file says. The split points are
read from the file's op order, which is placer's topological order of the export's nodes (the
order the model's code ran them in).
"""

import torch

from .module_map import LOSS_OPS, describe_scope, op_site
from .placement_file import PlacementError


def read_stages(placement, modules, replica):
    """(stage devices in order, split points: the module name each later stage starts with)
    of replica `replica`'s pipeline; raises PlacementError naming the op that does not fit."""
    m = placement.micro_batches
    parts = placement.ops[replica * m:(replica + 1) * m]
    where = placement.where(replica * m)
    for k, ops in enumerate(parts[1:], 1):
        moved = next((op for op, device in ops.items() if parts[0][op] != device), None)
        if moved is not None:
            raise PlacementError(
                f"{placement.where(replica * m + k)}: op '{moved}' runs on {ops[moved]}, on "
                f"{parts[0][moved]} in micro-batch 0: a stage of torch.distributed.pipelining "
                "runs the same ops for every micro-batch")
    stages, splits, started = [], [], set()
    for op, device in parts[0].items():
        if op in LOSS_OPS:
            if op == "loss" and device != stages[-1]:
                raise PlacementError(f"{where}: the loss is on {device}, not on the last stage "
                                     f"({stages[-1]}), where torch.distributed.pipelining "
                                     "computes it")
            continue
        if "::" in op:
            continue
        site = op_site(op, modules)
        if site is None:
            raise PlacementError(f"{where}: op '{op}' cannot be mapped to a module of the model")
        if site.constant:
            continue
        if device not in stages:
            # A new stage: it must begin where a module's call begins.
            fresh = [name for name, call in site.scope if call == 0 and name not in started]
            if stages and not fresh:
                raise PlacementError(
                    f"{where}: stage {len(stages)} ({device}) starts at op '{op}', inside "
                    f"{describe_scope(site.scope)}: torch.distributed.pipelining cuts a model "
                    "where a submodule's call begins")
            if stages:
                splits.append(fresh[0])
            stages.append(device)
        elif device != stages[-1]:
            raise PlacementError(
                f"{where}: op '{op}' goes back to {device} after {stages[-1]}: the stages of "
                "torch.distributed.pipelining run one after the other")
        started.update(name for name, _ in site.scope)
    return stages, splits


class PipelineStageRunner:
    """Stage `stage` of a replica's pipeline in this process: its step runs the file's schedule
    over the stage ranks with torch.distributed.pipelining, built at the first step (tracing
    needs a micro-batch)."""

    def __init__(self, model, placement, stage, stages, splits, device, group):
        self.model, self.placement = model, placement
        self.stage, self.stages, self.splits = stage, stages, splits
        self.device, self.group = device, group
        self.schedule = None  # the file's, over torch.distributed.pipelining's stage
        self.loss_fn = None
        self.order = []  # PyTorch's schedule runs the passes; they are not recorded here

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            f"{self.placement.path}: a pipeline over processes trains with "
            "model.step(inputs, target, loss_fn), which runs its schedule on every stage")

    def step(self, inputs, target, loss_fn):
        """The replica's pipeline on its part of the rows; its mean loss on every stage."""
        from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe
        import torch.distributed as dist

        m = self.placement.micro_batches
        self.loss_fn = loss_fn
        if self.schedule is None:
            # Traced where the model's parameters are; build_stage moves the stage's.
            where = next(self.model.parameters()).device
            stage = self._build(tuple(x[:x.shape[0] // m].to(where) for x in inputs))
            kind = Schedule1F1B if self.placement.schedule == "1f1b" else ScheduleGPipe
            # One schedule for every step (a stage's shapes are set once); the loss of the step.
            self.schedule = kind(stage, m, loss_fn=lambda out, tgt: self.loss_fn(out, tgt))
        schedule = self.schedule
        last = self.stage == len(self.stages) - 1
        losses = []
        if self.stage == 0:
            schedule.step(*(x.to(self.device) for x in inputs))
        elif last:
            schedule.step(target=target.to(self.device), losses=losses)
        else:
            schedule.step()
        loss = (torch.stack(losses).mean().detach() if last
                else torch.zeros((), device=self.device))
        dist.broadcast(loss, src=dist.get_global_rank(self.group, len(self.stages) - 1),
                       group=self.group)
        return loss

    def _build(self, example):
        from torch.distributed.pipelining import SplitPoint, pipeline

        try:
            pipe = pipeline(self.model, mb_args=example,
                            split_spec={name: SplitPoint.BEGINNING for name in self.splits})
        except Exception as error:
            raise PlacementError(
                f"{self.placement.path}: torch.distributed.pipelining could not cut the model "
                f"before {', '.join(self.splits)}: {type(error).__name__}: {error}") from error
        return pipe.build_stage(self.stage, self.device, group=self.group)
