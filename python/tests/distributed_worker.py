"""One process of test_distributed's runs, started by torchrun (Gloo, CPU): for every case of the
JSON list in argv[1], apply the case's placement file to its model across the processes, train two
SGD steps with momentum beside the unplaced model on the whole minibatch, and write what this rank
saw to argv[2]/<case>.<rank>.json: the losses, the largest differences of loss and parameters
from the unplaced model, whether they are within the tolerance, and facts the tests check; or the
error the case raised."""

import copy
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

import placer_torch
import support

# As test_apply's: the replicas and micro-batches add up their gradients in another order than one
# batch does, and the split's partial products theirs: float32 rounding.
RTOL, ATOL = 1e-5, 1e-6


def full(tensor):
    """A parameter whole: a split one's shards gathered (a collective: every rank calls it)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def train(case, placed, reference, images, labels):
    """Two steps of `placed` (its step, or DDP's call on this rank's rows) and of the unplaced
    `reference`; returns the losses of both."""
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
                  for m in (placed, reference)]
    losses = []
    for _ in range(2):
        for optimizer in optimizers:
            optimizer.zero_grad()
        if case["mode"] == "step":
            loss = placed.step(images, labels, F.cross_entropy)
        else:  # DDP's way: each rank its own equal share of the rows, its own mean loss
            rows = images.shape[0] // dist.get_world_size()
            mine = slice(rows * dist.get_rank(), rows * (dist.get_rank() + 1))
            loss = F.cross_entropy(placed(images[mine]), labels[mine])
            loss.backward()
            loss = loss.detach().clone()
            dist.all_reduce(loss)
            loss /= dist.get_world_size()
        ref_loss = F.cross_entropy(reference(images), labels)
        ref_loss.backward()
        for optimizer in optimizers:
            optimizer.step()
        losses.append((loss.item(), ref_loss.item()))
    return losses


def run(case):
    torch.manual_seed(0)
    model = getattr(support, case["model"])()
    reference = copy.deepcopy(model)
    placed = placer_torch.apply(model, case["placement"])
    torch.manual_seed(1)
    images = torch.randn(case["batch"], *case["shape"])
    labels = torch.randint(0, 10, (case["batch"],))
    losses = train(case, placed, reference, images, labels)
    result = {"losses": losses, "loss_diff": max(abs(a - b) for a, b in losses),
              "param_diff": 0.0, "mismatch": None, "order": placed.order,
              "replica": placed.replica, "shard": placed.shard, "stage": placed.stage,
              "compared": [], "schedule": None}
    if placed.stage is not None:  # torch.distributed.pipelining's schedule that ran
        result["schedule"] = type(placed.local.schedule).__name__
    for (name, p), r in zip(model.named_parameters(), reference.parameters()):
        if placed.stage is not None and p.grad is None:
            continue  # another stage's: that rank trains it
        result["compared"].append(name)
        whole = full(p.detach())
        result["param_diff"] = max(result["param_diff"], (whole - r).abs().max().item())
        try:
            torch.testing.assert_close(whole, r.detach(), rtol=RTOL, atol=ATOL)
        except AssertionError as error:
            result["mismatch"] = result["mismatch"] or f"parameter {name}: {error}"
    for loss, ref_loss in losses:
        if abs(loss - ref_loss) > ATOL + RTOL * abs(ref_loss):
            result["mismatch"] = result["mismatch"] or f"loss {loss} vs {ref_loss}"
    if placed.layout is not None:
        result["column"] = sorted(placed.layout.column)
        result["row"] = sorted(placed.layout.row)
        result["split"] = sorted(name for name, p in model.named_parameters()
                                 if hasattr(p, "full_tensor"))
    return result


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    dist.init_process_group("gloo")
    for case in cases:
        try:
            result = run(case)
        except Exception as error:  # recorded for the test to show, then the next case
            result = {"error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc()}
        path = os.path.join(sys.argv[2], f"{case['name']}.{dist.get_rank()}.json")
        with open(path, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
