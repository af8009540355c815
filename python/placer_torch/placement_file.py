"""Reading a placement file of placer (best_placement.yaml of `placer search`).

The file maps every forward op of the training step placer placed to a device:

    devices: [cpu:0, cuda:0]
    replicas: 2                  # optional: the model replicated R times, op names "r<k>/<op>"
    micro_batches: 4             # optional: a pipeline of M micro-batches, op names "m<k>/<op>"
    schedule: 1f1b               #   and the order they run in: gpipe (the default) or 1f1b
    default: cpu:0               # optional: for what the file does not list
    placement: {/conv1/Conv: cuda:0, /fc/Gemm: cpu:0, loss: cpu:0, ...}

A device is given by name or by its position in `devices`. placer's own files may also hold
`rules` (name patterns) or `variants`; those need the model's full op list, which only placer
has, so they are refused here with the reason. A file with both replicas and micro-batches is
R replicated pipelines, replica r's micro-batch k named "r<r>/m<k>/<op>". A tensor-parallel file
(`tensor_ways: T`) splits each replica's Megatron pairs T ways: shard s's ops are named
"r<r>/tp<s>/<op>", the ops no split reaches "r<r>/<op>", even with one replica
(tensor_parallel.py reads the split).
"""

import re
from dataclasses import dataclass, field

import yaml


class PlacementError(ValueError):
    """A placement file, or a placement, that cannot be applied to a model; the message names
    the file, op or module."""


# The prefix of replica k's ops, and of micro-batch k's (graph::MicroBatchName).
_PREFIX = {"replicas": re.compile(r"^r(\d+)/(.*)$", re.DOTALL),
           "micro_batches": re.compile(r"^m(\d+)/(.*)$", re.DOTALL),
           "both": re.compile(r"^r(\d+)/m(\d+)/(.*)$", re.DOTALL)}
# Shard s's copy of an op of a tensor-parallel file (graph::ShardName), after those prefixes.
SHARD = re.compile(r"^tp(\d+)/(.*)$", re.DOTALL)
# graph::ToString(PipelineSchedule).
SCHEDULES = ("gpipe", "1f1b")


@dataclass
class PlacementFile:
    path: str
    devices: list
    replicas: int = 1
    micro_batches: int = 1
    schedule: str = "gpipe"
    tensor_ways: int = 1  # shards per replica (ops "tp<s>/<op>" in each part)
    default: str = None
    # Per part: per replica, per micro-batch of a pipeline, or for replicated pipelines replica
    # r's micro-batch k at part r * M + k (one entry for neither): op name without its "r<r>/",
    # "m<k>/" or "r<r>/m<k>/" prefix -> device.
    ops: list = field(default_factory=list)
    # One process's share of a file (distributed.py): its replica's parts only, `replicas` 1;
    # the replica it is, for messages.
    replica: int = None

    def replica_of(self, part):
        return part // self.micro_batches

    def micro_batch_of(self, part):
        return part % self.micro_batches

    def where(self, k):
        """The file, and part k's replica or micro-batch when there are several, for messages."""
        if self.replica is not None:
            return (f"{self.path} (replica {self.replica}"
                    + (f", micro-batch {k})" if self.micro_batches > 1 else ")"))
        if self.micro_batches > 1 and self.replicas > 1:
            return (f"{self.path} (replica {self.replica_of(k)}, "
                    f"micro-batch {self.micro_batch_of(k)})")
        if self.micro_batches > 1:
            return f"{self.path} (micro-batch {k})"
        return self.path + (f" (replica {k})" if k else "")


def _device(value, devices, path, where):
    if isinstance(value, bool):
        raise PlacementError(f"{path}: {where}: expected a device name or index, got {value!r}")
    if isinstance(value, int):
        if not 0 <= value < len(devices):
            raise PlacementError(
                f"{path}: {where}: device index {value} is out of range (devices: {devices})")
        return devices[value]
    if isinstance(value, str) and value in devices:
        return value
    raise PlacementError(f"{path}: {where}: unknown device {value!r} (devices: {devices})")


def read_placement_file(path):
    """Reads and checks `path`; raises PlacementError naming the file and key."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as error:
        raise PlacementError(f"cannot read placement file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise PlacementError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise PlacementError(f"{path}: expected a mapping with 'devices' and 'placement'")
    for key in ("rules", "variants"):
        if key in data:
            raise PlacementError(
                f"{path}: '{key}' needs the model's whole op list, which placer_torch does not "
                "have; apply a file that lists every op, such as best_placement.yaml of "
                "`placer search`")
    # model and step_time_seconds: what `placer search` notes about the placement.
    unknown = sorted(set(data) - {"devices", "replicas", "micro_batches", "schedule", "default",
                                  "placement", "model", "step_time_seconds", "tensor_ways"})
    if unknown:
        raise PlacementError(f"{path}: unknown key '{unknown[0]}'")
    devices = data.get("devices")
    if (not isinstance(devices, list) or not devices
            or not all(isinstance(d, str) and d for d in devices)):
        raise PlacementError(f"{path}: 'devices' must be a non-empty list of device names")
    if len(set(devices)) != len(devices):
        raise PlacementError(f"{path}: 'devices' lists a device twice: {devices}")
    counts = {}
    for key in ("replicas", "micro_batches", "tensor_ways"):
        count = data.get(key, 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise PlacementError(f"{path}: '{key}' must be an integer >= 1, got {count!r}")
        counts[key] = count
    replicas, micro_batches = counts["replicas"], counts["micro_batches"]
    tensor_ways = counts["tensor_ways"]
    schedule = data.get("schedule", "gpipe")
    if schedule not in SCHEDULES:
        raise PlacementError(
            f"{path}: 'schedule' must be {' or '.join(SCHEDULES)}, got {schedule!r}")
    default = data.get("default")
    if default is not None:
        default = _device(default, devices, path, "default")
    placement = data.get("placement")
    if not isinstance(placement, dict) or not placement:
        raise PlacementError(f"{path}: 'placement' must map op names to devices")
    # Replicas or micro-batches (or both): one part each, its ops named with its prefix. A split
    # step names its replicas so even when there is one (r0/tp<s>/<op>: the Megatron step's).
    if (replicas > 1 or tensor_ways > 1) and micro_batches > 1:
        key, parts = "both", replicas * micro_batches
        parts_name = None
        naming = (f"r<replica>/m<micro-batch>/<op> with a replica below {replicas} and a "
                  f"micro-batch below {micro_batches}, as a file with 'replicas: {replicas}' and "
                  f"'micro_batches: {micro_batches}' must")
    else:
        key, parts = (("micro_batches", micro_batches) if micro_batches > 1
                      else ("replicas", replicas))
        part, parts_name, letter = (("micro-batch", "micro-batches", "m")
                                    if key == "micro_batches" else ("replica", "replicas", "r"))
        naming = (f"{letter}<{part}>/<op> with a {part} below {parts}, as a file with "
                  + (f"'tensor_ways: {tensor_ways}' must" if key == "replicas" and tensor_ways > 1
                     else f"'{key}: {parts}' must"))
    ops = [dict() for _ in range(parts)]
    for name, value in placement.items():
        name = str(name)
        device = _device(value, devices, path, f"placement: {name}")
        k = 0
        if parts > 1 or tensor_ways > 1:
            match = _PREFIX[key].match(name)
            if key == "both":
                if (match is None or int(match.group(1)) >= replicas
                        or int(match.group(2)) >= micro_batches):
                    raise PlacementError(f"{path}: op '{name}' is not named {naming}")
                k = int(match.group(1)) * micro_batches + int(match.group(2))
                name = match.group(3)
            else:
                if match is None or int(match.group(1)) >= parts:
                    raise PlacementError(f"{path}: op '{name}' is not named {naming}")
                k, name = int(match.group(1)), match.group(2)
        shard = SHARD.match(name)
        if shard is not None and int(shard.group(1)) >= tensor_ways:
            raise PlacementError(
                f"{path}: op '{name}' is shard {shard.group(1)} of a split op, but the file has "
                f"'tensor_ways: {tensor_ways}' (shards tp0 to tp{tensor_ways - 1})")
        ops[k][name] = device
    for k in range(1, parts):
        if set(ops[k]) != set(ops[0]):
            missing = sorted(set(ops[0]) ^ set(ops[k]))[0]
            pair = (f"{parts_name} 0 and {k}" if key != "both" else
                    f"replica 0's micro-batch 0 and replica {k // micro_batches}'s micro-batch "
                    f"{k % micro_batches}")
            raise PlacementError(f"{path}: {pair} do not hold the same ops (op '{missing}')")
    return PlacementFile(path=str(path), devices=devices, replicas=replicas,
                         micro_batches=micro_batches, schedule=schedule,
                         tensor_ways=tensor_ways, default=default, ops=ops)
