"""Reading a placement file of placer (best_placement.yaml of `placer search`).

The file maps every forward op of the training step placer placed to a device:

    devices: [cpu:0, cuda:0]
    replicas: 2                  # optional: the model replicated R times, op names "r<k>/<op>"
    default: cpu:0               # optional: for what the file does not list
    placement: {/conv1/Conv: cuda:0, /fc/Gemm: cpu:0, loss: cpu:0, ...}

A device is given by name or by its position in `devices`. placer's own files may also hold
`rules` (name patterns) or `variants`; those need the model's full op list, which only placer
has, so they are refused here with the reason.
"""

import re
from dataclasses import dataclass, field

import yaml


class PlacementError(ValueError):
    """A placement file, or a placement, that cannot be applied to a model; the message names
    the file, op or module."""


_REPLICA_PREFIX = re.compile(r"^r(\d+)/(.*)$", re.DOTALL)


@dataclass
class PlacementFile:
    path: str
    devices: list
    replicas: int = 1
    default: str = None
    # Per replica (one entry when replicas == 1): op name without its "r<k>/" prefix -> device.
    ops: list = field(default_factory=list)


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
    unknown = sorted(set(data) - {"devices", "replicas", "default", "placement", "model",
                                  "step_time_seconds"})
    if unknown:
        raise PlacementError(f"{path}: unknown key '{unknown[0]}'")
    devices = data.get("devices")
    if (not isinstance(devices, list) or not devices
            or not all(isinstance(d, str) and d for d in devices)):
        raise PlacementError(f"{path}: 'devices' must be a non-empty list of device names")
    if len(set(devices)) != len(devices):
        raise PlacementError(f"{path}: 'devices' lists a device twice: {devices}")
    replicas = data.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise PlacementError(f"{path}: 'replicas' must be an integer >= 1, got {replicas!r}")
    default = data.get("default")
    if default is not None:
        default = _device(default, devices, path, "default")
    placement = data.get("placement")
    if not isinstance(placement, dict) or not placement:
        raise PlacementError(f"{path}: 'placement' must map op names to devices")
    ops = [dict() for _ in range(replicas)]
    for name, value in placement.items():
        name = str(name)
        device = _device(value, devices, path, f"placement: {name}")
        replica = 0
        if replicas > 1:
            match = _REPLICA_PREFIX.match(name)
            if match is None or int(match.group(1)) >= replicas:
                raise PlacementError(
                    f"{path}: op '{name}' is not named r<replica>/<op> with a replica below "
                    f"{replicas}, as a file with 'replicas: {replicas}' must")
            replica, name = int(match.group(1)), match.group(2)
        ops[replica][name] = device
    for replica in range(1, replicas):
        if set(ops[replica]) != set(ops[0]):
            missing = sorted(set(ops[0]) ^ set(ops[replica]))[0]
            raise PlacementError(
                f"{path}: replicas 0 and {replica} do not hold the same ops (op '{missing}')")
    return PlacementFile(path=str(path), devices=devices, replicas=replicas, default=default,
                         ops=ops)
