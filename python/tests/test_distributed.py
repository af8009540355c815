"""placer_torch across processes: placer's answers run by torchrun's processes on the CPU (Gloo),
each training two SGD steps (momentum) as the unplaced model does on the whole minibatch, within
rtol 1e-5 and atol 1e-6 on the losses and every parameter (distributed_worker.py runs them; one
torchrun of two processes for the cases of two, one of four for the cases of four, each under a
hard timeout). And, in this process, how a tensor-parallel file's split is read and what is
refused."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

import torch
import yaml

import placer_torch
from placer_torch import PlacementError
from placer_torch.pipeline_stages import read_stages
from placer_torch.tensor_parallel import read_layout
from support import Net, SplitNet, base_ops, export, export_ops, search, write_placement

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 600  # seconds for the whole torchrun; its process group is killed after


def torchrun(cases, directory, processes):
    """Runs distributed_worker.py on `cases` in `processes` processes; {case: [result per
    rank]}."""
    os.makedirs(directory, exist_ok=True)
    spec = os.path.join(directory, "cases.json")
    with open(spec, "w") as f:
        json.dump(cases, f)
    out = os.path.join(directory, "results")
    os.makedirs(out)
    # --standalone: a rendezvous on a free port of this machine.
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={processes}", os.path.join(HERE, "distributed_worker.py"),
               spec, out]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        log, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # torchrun and its workers
        log, _ = process.communicate()
        raise AssertionError(f"torchrun ran over {TIMEOUT} s:\n{log[-4000:]}") from None
    results = {}
    for case in cases:
        results[case["name"]] = []
        for rank in range(processes):
            path = os.path.join(out, f"{case['name']}.{rank}.json")
            if not os.path.exists(path):
                raise AssertionError(f"rank {rank} wrote nothing for case {case['name']} "
                                     f"(torchrun exit {process.returncode}):\n{log[-4000:]}")
            with open(path) as f:
                results[case["name"]].append(json.load(f))
    return results


MICRO_BATCHES = 4
SPLIT_BATCH = 32  # where the search splits SplitNet (support.py)


# The ops of stem and block1 up to its conv2.
INSIDE_BLOCK1 = ("/stem/", "/block1/conv1/", "/block1/relu/")


def two_stages(op, k):
    """Part k is micro-batch k % M of replica k // M: stem and block1 on the replica's first
    device, the rest on its second (replica r on cpu:2r and cpu:2r+1)."""
    first = op.startswith(("/stem/", "/block1/"))
    return f"cpu:{2 * (k // MICRO_BATCHES) + (0 if first else 1)}"


def replicate_split(path, out):
    """The two-way split of the file at `path` (one replica on cpu:0 and cpu:1) as two replicas,
    the second on cpu:2 and cpu:3: the search's tensor parallel 2 x data parallel 2, its ops named
    as placer names that step's ("r<r>/tp<s>/<op>"). Returns `out`."""
    with open(path) as f:
        data = yaml.safe_load(f)
    ops = data["placement"]
    shifted = {f"r1/{op.removeprefix('r0/')}": f"cpu:{int(d.split(':')[1]) + 2}"
               for op, d in ops.items()}
    with open(out, "w") as f:
        yaml.safe_dump({"model": data["model"], "devices": ["cpu:0", "cpu:1", "cpu:2", "cpu:3"],
                        "replicas": 2, "tensor_ways": data["tensor_ways"],
                        "placement": {**ops, **shifted}}, f, sort_keys=False)
    return out


class DistributedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.addClassCleanup(cls.dir.cleanup)  # also when setUpClass fails
        directory = cls.dir.name
        torch.manual_seed(0)
        net_dir, split_dir = (os.path.join(directory, name) for name in ("net", "split"))
        os.makedirs(net_dir)
        os.makedirs(split_dir)
        export(Net(), os.path.join(net_dir, "net.onnx"), torch.randn(2, 3, 12, 12))
        ops = base_ops(search(os.path.join(net_dir, "net.onnx"), net_dir, 8))
        # The searched op names as two replicated pipelines (two replicas of four micro-batches
        # of one row, each replica's two stages on its own two workers), as placer names them.
        for schedule in ("gpipe", "1f1b"):
            write_placement(os.path.join(directory, f"pipelines-{schedule}.yaml"), ops,
                            two_stages, replicas=2, micro_batches=MICRO_BATCHES, schedule=schedule,
                            devices=("cpu:0", "cpu:1", "cpu:2", "cpu:3"))
        # One pipeline of two stages as two processes: under GPipe the same stages, under 1F1B
        # the cut inside block1, before its conv2 (its skip connection crosses the cut).
        write_placement(os.path.join(directory, "stages-gpipe.yaml"), ops, two_stages,
                        micro_batches=MICRO_BATCHES, schedule="gpipe")
        write_placement(os.path.join(directory, "stages-1f1b.yaml"), ops,
                        lambda op, k: "cpu:0" if op.startswith(INSIDE_BLOCK1) else "cpu:1",
                        micro_batches=MICRO_BATCHES, schedule="1f1b")
        for replicas in (2, 3):
            write_placement(os.path.join(directory, f"replicas-{replicas}.yaml"), ops,
                            lambda op, k: f"cpu:{k}", replicas=replicas,
                            devices=tuple(f"cpu:{k}" for k in range(replicas)))
        # A tensor-parallel answer: the search's, split two ways (search.tensor_ways: [2]).
        export(SplitNet(), os.path.join(split_dir, "split.onnx"), torch.randn(2, 12))
        cls.split_file = search(os.path.join(split_dir, "split.onnx"), split_dir, SPLIT_BATCH,
                                replicas=(2,), tensor_ways=[2])
        net = {"model": "Net", "batch": 8, "shape": [3, 12, 12]}
        cases = [dict(net, name=f"pipelines-{s}", mode="step",
                      placement=os.path.join(directory, f"pipelines-{s}.yaml"))
                 for s in ("gpipe", "1f1b")]
        cases += [dict(net, name=f"stages-{s}", mode="step",
                       placement=os.path.join(directory, f"stages-{s}.yaml"))
                  for s in ("gpipe", "1f1b")]
        cases += [dict(net, name="pipelines-call", mode="call",
                       placement=os.path.join(directory, "pipelines-1f1b.yaml")),
                  # 7 rows: shards of 3 and 4 (placer's even split), each replica's mean loss
                  # weighted by its rows.
                  dict(net, name="uneven", mode="step", batch=7,
                       placement=os.path.join(directory, "replicas-2.yaml")),
                  dict(net, name="three", mode="step",
                       placement=os.path.join(directory, "replicas-3.yaml")),
                  {"name": "split", "model": "SplitNet", "batch": SPLIT_BATCH, "shape": [12],
                   "mode": "step", "placement": cls.split_file}]
        cls.results = torchrun(cases, os.path.join(directory, "two"), 2)
        # Four processes: the split answer with two replicas (a rank per shard of each), and two
        # replicated pipelines with a rank per stage (torch.distributed.pipelining per replica).
        split_dp = replicate_split(cls.split_file, os.path.join(directory, "split-dp.yaml"))
        cases = [{"name": "split-dp", "model": "SplitNet", "batch": SPLIT_BATCH, "shape": [12],
                  "mode": "step", "placement": split_dp}]
        cases += [dict(net, name=f"pipeline-stages-{s}", mode="step",
                       placement=os.path.join(directory, f"pipelines-{s}.yaml"))
                  for s in ("gpipe", "1f1b")]
        cls.results.update(torchrun(cases, os.path.join(directory, "four"), 4))

    def assert_trains_as_the_unplaced_model(self, case):
        for rank, result in enumerate(self.results[case]):
            self.assertNotIn("error", result, result.get("traceback"))
            self.assertIsNone(result["mismatch"], f"rank {rank}")
            print(f"\n{case} rank {rank}: losses {result['losses']}, largest difference from the "
                  f"unplaced model: loss {result['loss_diff']:.2e}, parameters "
                  f"{result['param_diff']:.2e}", file=sys.stderr)
        return self.results[case]

    def test_replicated_pipelines_train_as_the_unplaced_model(self):
        # Replica r on rank r runs its four micro-batches in the file's schedule: under 1F1B
        # (two stages) at most two between their forward and their backward.
        orders = {"gpipe": ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"],
                  "1f1b": ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]}
        for schedule, order in orders.items():
            with self.subTest(schedule=schedule):
                results = self.assert_trains_as_the_unplaced_model(f"pipelines-{schedule}")
                self.assertEqual([r["replica"] for r in results], [0, 1])
                for result in results:
                    self.assertEqual([f"{kind}{k}" for kind, k in result["order"]], order)

    def test_pipeline_stages_as_processes_train_as_the_unplaced_model(self):
        # Two stages, two processes: torch.distributed.pipelining's schedules; each rank
        # trains its stage's parameters, the two cover the model.
        every = [name for name, _ in Net().named_parameters()]
        first = {"gpipe": ("stem.", "block1."), "1f1b": ("stem.", "block1.conv1.")}
        kinds = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}
        for schedule, stage0 in first.items():
            with self.subTest(schedule=schedule):
                results = self.assert_trains_as_the_unplaced_model(f"stages-{schedule}")
                self.assertEqual([r["stage"] for r in results], [0, 1])
                self.assertEqual({r["schedule"] for r in results}, {kinds[schedule]})
                self.assertEqual(results[0]["compared"],
                                 [n for n in every if n.startswith(stage0)])
                self.assertEqual(results[0]["compared"] + results[1]["compared"], every)

    def test_ddp_calls_train_as_the_unplaced_model(self):
        # A plain call on each rank's own half of the rows; the backward averages the gradients.
        self.assert_trains_as_the_unplaced_model("pipelines-call")

    def test_replicas_of_unequal_shards_train_as_the_unplaced_model(self):
        self.assert_trains_as_the_unplaced_model("uneven")

    def test_a_tensor_parallel_answer_trains_as_the_unplaced_model(self):
        results = self.assert_trains_as_the_unplaced_model("split")
        self.assertEqual([r["shard"] for r in results], [0, 1])
        for result in results:
            self.assertEqual(result["column"], ["block1.fc1", "block2.fc1"])
            self.assertEqual(result["row"], ["block1.fc2", "block2.fc2"])
            # Their weights and biases DTensors (a row-parallel bias replicated), the rest not.
            self.assertEqual(result["split"], [f"block{b}.fc{f}.{p}" for b in (1, 2)
                                               for f in (1, 2) for p in ("bias", "weight")])

    def test_a_tensor_parallel_answer_with_replicas_trains_as_the_unplaced_model(self):
        results = self.assert_trains_as_the_unplaced_model("split-dp")
        self.assertEqual([(r["replica"], r["shard"]) for r in results],
                         [(0, 0), (0, 1), (1, 0), (1, 1)])
        for result in results:
            self.assertEqual(result["column"], ["block1.fc1", "block2.fc1"])
            self.assertEqual(result["row"], ["block1.fc2", "block2.fc2"])

    def test_replicated_pipeline_stages_as_processes_train_as_the_unplaced_model(self):
        # Two pipelines of two stages on four ranks: rank r runs stage r % 2 of replica r // 2.
        kinds = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}
        for schedule, kind in kinds.items():
            with self.subTest(schedule=schedule):
                results = self.assert_trains_as_the_unplaced_model(f"pipeline-stages-{schedule}")
                self.assertEqual([(r["replica"], r["stage"]) for r in results],
                                 [(0, 0), (0, 1), (1, 0), (1, 1)])
                self.assertEqual({r["schedule"] for r in results}, {kind})
                every = [name for name, _ in Net().named_parameters()]
                for replica in (0, 1):
                    stages = results[2 * replica:2 * replica + 2]
                    self.assertEqual(stages[0]["compared"] + stages[1]["compared"], every)

    def test_processes_that_do_not_match_the_file_are_refused(self):
        for result in self.results["three"]:
            self.assertIn("replicas-3.yaml: 3 replicas run on 3 processes, one each (torchrun "
                          "--nproc_per_node 3); torch.distributed has 2",
                          result.get("error"))


class PipelineStagesTest(unittest.TestCase):
    """Where torch.distributed.pipelining cuts a pipelined file's model, read in this process
    (the op names of Net's export, as PipelineTest in test_apply builds its files)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.addClassCleanup(cls.dir.cleanup)  # also when setUpClass fails
        onnx = os.path.join(cls.dir.name, "net.onnx")
        export(Net(), onnx, torch.randn(2, 3, 12, 12))
        cls.ops = export_ops(onnx)

    def stages(self, device_of, replicas=1):
        path = write_placement(os.path.join(self.dir.name, "p.yaml"), self.ops, device_of,
                               replicas=replicas, micro_batches=2,
                               devices=("cpu:0", "cpu:1", "cpu:2", "cpu:3"))
        return read_stages(placer_torch.read_placement_file(path),
                           dict(Net().named_modules()), replicas - 1)

    def test_each_stage_starts_where_a_module_call_begins(self):
        self.assertEqual(self.stages(lambda op, k: two_stages(op, 0)), (["cpu:0", "cpu:1"],
                                                                        ["block2"]))
        # Replica 1's pipeline on its own devices; a cut inside block1, before its conv2.
        def inside_block1(op, k):
            return f"cpu:{2 * (k // 2) + (0 if op.startswith(INSIDE_BLOCK1) else 1)}"

        self.assertEqual(self.stages(inside_block1, replicas=2),
                         (["cpu:2", "cpu:3"], ["block1.conv2"]))

    def test_a_pipeline_that_does_not_fit_is_refused_naming_the_op(self):
        later = ("/Concat", "/pool/", "/Flatten", "/head/", "loss")
        cases = {
            # The model's own Concat starts the second stage: no module's call begins there.
            "inside": (lambda op, k: "cpu:1" if op.startswith(later) else "cpu:0",
                       r"stage 1 \(cpu:1\) starts at op '/Concat', inside the model itself"),
            "back": (lambda op, k: "cpu:1" if op.startswith("/block1/") else "cpu:0",
                     "op '/block2/conv1/Conv' goes back to cpu:0 after cpu:1"),
            "micro-batches": (lambda op, k: "cpu:1" if k and op.startswith("/head/") or
                              op == "loss" else "cpu:0",
                              r"\(micro-batch 1\): op '/head/Gemm' runs on cpu:1, on cpu:0 in "
                              "micro-batch 0"),
            "loss": (lambda op, k: "cpu:1" if op.startswith("/head/") else "cpu:0",
                     "the loss is on cpu:0, not on the last stage"),
        }
        for what, (device_of, expected) in cases.items():
            with self.subTest(what):
                with self.assertRaisesRegex(PlacementError, "p.yaml.*" + expected):
                    self.stages(device_of)


class TensorParallelLayoutTest(unittest.TestCase):
    """The split a tensor-parallel answer of the search says, read in this one process."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.addClassCleanup(cls.dir.cleanup)  # also when setUpClass fails
        onnx = os.path.join(cls.dir.name, "split.onnx")
        torch.manual_seed(0)
        export(SplitNet(), onnx, torch.randn(2, 12))
        cls.path = search(onnx, cls.dir.name, SPLIT_BATCH, replicas=(2,), tensor_ways=[2])
        cls.file = placer_torch.read_placement_file(cls.path)

    def layout(self, model, ops=None):
        return read_layout(ops or self.file.ops[0], dict(model.named_modules()), 2, "p.yaml")

    def test_the_search_splits_both_blocks(self):
        self.assertEqual((self.file.tensor_ways, self.file.replicas), (2, 1))
        ops = self.file.ops[0]
        # block1's sum feeds block2's split: a ring all-reduce on both shards; block2's is
        # summed onto one device.
        self.assertTrue(any(op.startswith("tp1//block1/fc2/Gemm/allreduce/") for op in ops))
        self.assertIn("/block2/fc2/Gemm/tp_sum", ops)
        layout = self.layout(SplitNet())
        self.assertEqual(layout.column, {"block1.fc1": "/block1/fc1/Gemm",
                                         "block2.fc1": "/block2/fc1/Gemm"})
        self.assertEqual(sorted(layout.row), ["block1.fc2", "block2.fc2"])
        # The LayerNorm after block1's all-reduce: every shard repeats it on the whole.
        self.assertEqual(layout.repeated, {"norm"})
        self.assertEqual(len(layout.shard_devices), 2)

    def test_one_process_refuses_a_split_file(self):
        with self.assertRaisesRegex(PlacementError, r"best_placement.yaml: 'tensor_ways: 2' \(op "
                                                    r"'tp1//block1/fc1/Gemm' is shard 1 of a "
                                                    r"split layer\): "
                                                    r"tensor-parallel shards run in processes "
                                                    r"of their own; .*--nproc_per_node 2"):
            placer_torch.apply(SplitNet(), self.path)

    def test_a_split_module_that_is_no_linear_is_refused(self):
        class Projection(torch.nn.Module):  # a Linear of its own, exported as the same Gemm
            def __init__(self, a, b):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.randn(b, a))
                self.bias = torch.nn.Parameter(torch.zeros(b))

        model = SplitNet()
        model.block2.fc1 = Projection(128, 1024)
        with self.assertRaisesRegex(PlacementError,
                                    r"p.yaml: op '/block2/fc1/Gemm' starts a column split, and "
                                    r"module 'block2.fc1' \(Projection\) is no nn.Linear"):
            self.layout(model)
        # An activation with a parameter between the pair: it would see the shards' slices.
        model = SplitNet()
        model.block1.act = torch.nn.PReLU()
        with self.assertRaisesRegex(PlacementError,
                                    r"p.yaml: op '/block1/act/Relu' runs on the shards' slices, "
                                    r"and module 'block1.act' \(PReLU\) holds parameters but is "
                                    r"no nn.Linear"):
            self.layout(model)

    def test_splits_that_are_no_column_row_pair_are_refused(self):
        cases = {"/block1/fc1/Gemm_output_0/tp_gather": "gathers tensor "
                                                        "'/block1/fc1/Gemm_output_0'",
                 "tp0//norm/tp_slice1": "slices tensor '/norm'",
                 # A piece of a split this reading does not know, as a fused projection's.
                 "tp1//block1/fc1/Gemm_output_0/tp_join1": "is a piece of the split that "
                                                          "placer_torch does not know"}
        for op, expected in cases.items():
            with self.subTest(op=op):
                ops = dict(self.file.ops[0], **{op: "cpu:0"})
                with self.assertRaisesRegex(PlacementError, f"p.yaml: op '{op}' {expected}.*"
                                                            "not a column/row pair"):
                    self.layout(SplitNet(), ops)

    def test_a_shard_on_two_devices_is_refused(self):
        ops = dict(self.file.ops[0])
        ops["tp1//block1/fc1/Gemm"] = "cpu:1" if ops["tp1//block2/fc1/Gemm"] == "cpu:0" else "cpu:0"
        with self.assertRaisesRegex(PlacementError, "p.yaml: shard 1 of the split runs on "
                                                    r"several devices \(cpu:0, cpu:1\)"):
            self.layout(SplitNet(), ops)


if __name__ == "__main__":
    unittest.main()
