"""placer_torch.apply on the CPU, with the op names of real placer files (`placer search` on a
model exported to ONNX), their devices rewritten as each test needs. Every device here is a CPU
worker, which PyTorch runs on its one CPU device: the tests check the step (same loss and
gradients as the unplaced model), where every module is said to run, which activations cross
between placement devices, and the errors."""

import copy
import os
import tempfile
import unittest

import torch
import torch.nn.functional as F
import yaml

import placer_torch
from placer_torch import PlacementError
from support import Net, base_ops, evaluate, export, export_ops, search, write_placement

BATCH = 6


def step(model, images, labels):
    """One forward and backward pass: the loss and every parameter's gradient."""
    for p in model.parameters():
        p.grad = None
    logits = model(images)
    loss = F.cross_entropy(logits, labels.to(logits.device))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.inner(x)
        y += x  # in place, as torchvision's residual blocks add
        return y


class InPlaceTest(unittest.TestCase):
    def test_an_in_place_op_runs_where_the_tensor_it_changes_is(self):
        with tempfile.TemporaryDirectory() as directory:
            # Op names as torch.onnx.export gives them to this module.
            path = write_placement(os.path.join(directory, "p.yaml"),
                                   ["/inner/Gemm", "/Add", "loss"],
                                   lambda op, r: "cpu:1" if op == "/inner/Gemm" else "cpu:0")
            model = Residual()
            reference = copy.deepcopy(model)
            placed = placer_torch.apply(model, path)
            x = torch.randn(3, 4)
            torch.testing.assert_close(placed(x), reference(x))
        # The Add is placed on cpu:0, but it changes the Linear's output on cpu:1 and runs
        # there; x comes to cpu:1 once, for both; the result goes to the loss.
        self.assertEqual(placed.transfers, {("host", "cpu:1"): 1, ("cpu:1", "cpu:0"): 1})


class ApplyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.onnx = os.path.join(cls.dir.name, "net.onnx")
        torch.manual_seed(0)
        export(Net(), cls.onnx, torch.randn(2, 3, 12, 12))
        cls.searched = search(cls.onnx, cls.dir.name, BATCH)
        cls.ops = base_ops(cls.searched)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def setUp(self):
        torch.manual_seed(1)
        self.images = torch.randn(BATCH, 3, 12, 12)
        self.labels = torch.randint(0, 10, (BATCH,))

    def placement(self, device_of, replicas=1, name="p.yaml", devices=("cpu:0", "cpu:1")):
        return write_placement(os.path.join(self.dir.name, name), self.ops, device_of, replicas,
                               devices)

    def assert_same_step(self, placed, reference, atol=1e-6):
        loss, grads = step(placed, self.images, self.labels)
        ref_loss, ref_grads = step(reference, self.images, self.labels)
        torch.testing.assert_close(loss, ref_loss, rtol=0, atol=atol)
        self.assertEqual(len(grads), len(ref_grads))
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=atol)

    def test_file_names_the_ops_of_the_export(self):
        self.assertIn("/block1/relu_1/Relu", self.ops)
        self.assertIn("/Concat", self.ops)
        self.assertIn("loss", self.ops)

    def test_the_export_names_its_ops_as_placer_does(self):
        # What PipelineTest builds its files from, without placer.
        self.assertEqual(export_ops(self.onnx), self.ops)

    def test_placer_runs_the_pipelines_placer_torch_runs(self):
        # A pipelined file as PipelineTest writes them: placer's executor reads it as three
        # micro-batches under 1F1B and copies each micro-batch's activation from cpu:0 to cpu:1
        # once, as placer_torch does.
        path = write_placement(os.path.join(self.dir.name, "pipe.yaml"), self.ops,
                               lambda op, k: "cpu:0" if op.startswith(("/stem/", "/block1/"))
                               else "cpu:1", micro_batches=3, schedule="1f1b")
        report = evaluate(self.dir.name, path)
        self.assertIn("(3 micro-batches of 2 rows, 1f1b)", report)
        self.assertRegex(report, r"cpu:0 -> cpu:1 +3 ")
        placed = placer_torch.apply(Net(), path)
        placed.step(self.images, self.labels, F.cross_entropy)
        self.assertEqual(placed.transfers[("cpu:0", "cpu:1")], 3)

    def test_the_searched_placement_gives_the_unplaced_step(self):
        model = Net()
        reference = copy.deepcopy(model)
        placed = placer_torch.apply(model, self.searched)
        self.assert_same_step(placed, reference)

    def test_model_parallel_split(self):
        # Stem and first block on cpu:0, the rest (the model's own Concat and Flatten too) on
        # cpu:1.
        first = ("/stem/", "/block1/")
        path = self.placement(lambda op, r: "cpu:0" if op.startswith(first) else "cpu:1")
        model = Net()
        reference = copy.deepcopy(model)
        placed = placer_torch.apply(model, path)
        for name in ("stem", "block1", "block1.conv2", "block1.relu"):
            self.assertEqual(placed.device_of(name), "cpu:0", name)
        for name in ("block2", "block2.conv1", "branch_a", "head", ""):
            self.assertEqual(placed.device_of(name), "cpu:1", name)
        for name, p in model.named_parameters():
            self.assertEqual(p.device, torch.device("cpu"), name)
        self.assert_same_step(placed, reference)
        # The minibatch comes in once; block1's output crosses once, although block2's conv1
        # and its own Add both read it.
        self.assertEqual(placed.transfers, {("host", "cpu:0"): 1, ("cpu:0", "cpu:1"): 1})

    def test_every_module_where_the_file_says(self):
        # Every module call on its own device, alternating: the ops of the file say where.
        modules = ["/stem/", "/block1/conv1/", "/block1/relu/", "/block1/conv2/", "/block1/Add",
                   "/block1/relu_1/", "/block2/conv1/", "/block2/relu/", "/block2/conv2/",
                   "/block2/Add", "/block2/relu_1/", "/branch_a/", "/branch_b/", "/head/"]

        def device_of(op, replica):
            for k, prefix in enumerate(modules):
                if op.startswith(prefix):
                    return f"cpu:{k % 2}"
            return "cpu:1"

        path = self.placement(device_of)
        model = Net()
        reference = copy.deepcopy(model)
        placed = placer_torch.apply(model, path)
        for op in self.ops:
            module = op.strip("/").split("/")[0]
            if op.startswith("/") and module in dict(model.named_modules()) and "relu" not in op:
                name = ".".join(op.strip("/").split("/")[:-1]).replace("block1.block1", "block1")
                self.assertEqual(placed.device_of(name), device_of(op, 0), op)
        self.assertEqual(placed.device_of("block1.relu"), None)  # its two calls differ
        self.assert_same_step(placed, reference)
        self.assertGreater(placed.transfers[("cpu:0", "cpu:1")], 5)

    def test_training_steps_match_the_unplaced_training(self):
        path = self.placement(lambda op, r: "cpu:1" if "block2" in op or "head" in op
                              else "cpu:0")
        model = Net()
        reference = copy.deepcopy(model)
        placed = placer_torch.apply(model, path)
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
                      for m in (placed, reference)]
        for _ in range(3):
            for m, optimizer in zip((placed, reference), optimizers):
                step(m, self.images, self.labels)
                optimizer.step()
        for p, r in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)

    def test_replicated_placements_give_the_unplaced_step(self):
        cases = {
            "data parallel": (lambda op, r: f"cpu:{r}", {("host", "cpu:0"): 1,
                                                         ("host", "cpu:1"): 1,
                                                         ("cpu:1", "cpu:0"): 1}),
            # The stem of both replicas on cpu:0, each replica's rest on its own worker.
            "hybrid": (lambda op, r: "cpu:0" if op.startswith("/stem/") else f"cpu:{r}",
                       {("host", "cpu:0"): 2, ("cpu:0", "cpu:1"): 1, ("cpu:1", "cpu:0"): 1}),
        }
        for what, (device_of, transfers) in cases.items():
            with self.subTest(what):
                path = self.placement(device_of, replicas=2, name=f"{what}.yaml")
                model = Net()
                reference = copy.deepcopy(model)
                placed = placer_torch.apply(model, path)
                self.assertEqual(placed.replicas, 2)
                self.assertEqual(placed.device_of("head", 1), "cpu:1")
                self.assert_same_step(placed, reference)
                # Each replica's shard goes to its stem; replica 1's logits come to replica 0's
                # loss.
                self.assertEqual(placed.transfers, transfers)

    def test_replicas_normalise_their_own_shard(self):
        # DDP's semantics: BatchNorm statistics per replica, replica 0's running statistics kept.
        path = self.placement(lambda op, r: f"cpu:{r}", replicas=3, name="norm.yaml",
                              devices=("cpu:0", "cpu:1", "cpu:2"))
        torch.manual_seed(0)
        model = Net(with_norm=True)
        reference = copy.deepcopy(model)
        placed = placer_torch.apply(model, path)
        loss, grads = step(placed, self.images, self.labels)
        shards = placer_torch.even_shards(BATCH, 3)
        self.assertEqual(shards, [2, 2, 2])
        first = copy.deepcopy(reference)
        for p in reference.parameters():
            p.grad = None
        total = 0
        for k, (images, labels) in enumerate(zip(self.images.split(shards),
                                                 self.labels.split(shards))):
            shard_model = reference if k == 0 else copy.deepcopy(first)
            if k:
                shard_model.load_state_dict(first.state_dict())
                for a, b in zip(shard_model.parameters(), reference.parameters()):
                    a.data = b.data  # the same parameters, so that gradients add up below
            logits = shard_model(images)
            shard_loss = F.cross_entropy(logits, labels, reduction="sum") / BATCH
            shard_loss.backward()
            if k:
                for a, b in zip(shard_model.parameters(), reference.parameters()):
                    b.grad += a.grad
            total += shard_loss.detach()
        torch.testing.assert_close(loss, total, rtol=0, atol=1e-6)
        for g, p in zip(grads, reference.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.norm.running_mean, reference.norm.running_mean)
        self.assertEqual(model.norm.num_batches_tracked.item(), 1)

    def test_a_module_split_over_devices_is_an_error_naming_it(self):
        # The model's own code (Concat, Flatten) on two devices.
        path = self.placement(lambda op, r: "cpu:1" if op == "/Flatten" else "cpu:0")
        with self.assertRaisesRegex(PlacementError,
                                    r"p.yaml: the model itself is split over several devices "
                                    r"\(cpu:0: /Concat.*cpu:1: /Flatten"):
            placer_torch.apply(Net(), path)

    def test_parameters_needed_on_two_devices_is_an_error(self):
        # One Linear module called from two places cannot be: here, a model whose head's op is
        # renamed as a second call on another device.
        ops = self.ops + ["/head_1/Gemm"]
        path = write_placement(os.path.join(self.dir.name, "twice.yaml"), ops,
                               lambda op, r: "cpu:1" if op.startswith("/head_1") else "cpu:0")
        with self.assertRaisesRegex(PlacementError, "module 'head' holds parameters and its "
                                                    "calls run on several devices"):
            placer_torch.apply(Net(), path)

    def test_an_op_of_another_model_is_an_error_naming_it(self):
        ops = self.ops + ["relu3"]
        path = write_placement(os.path.join(self.dir.name, "other.yaml"), ops,
                               lambda op, r: "cpu:0")
        with self.assertRaisesRegex(PlacementError,
                                    "other.yaml: op 'relu3' cannot be mapped to a module"):
            placer_torch.apply(Net(), path)

    def test_a_missing_gpu_is_an_error_naming_the_device(self):
        if torch.cuda.is_available():
            self.skipTest("this machine has a GPU: cuda:0 is there")
        path = write_placement(os.path.join(self.dir.name, "gpu.yaml"), self.ops,
                               lambda op, r: "cuda:0", devices=("cpu:0", "cuda:0"))
        with self.assertRaisesRegex(PlacementError, "device 'cuda:0' is cuda:0, which this "
                                                    "machine does not have"):
            placer_torch.apply(Net(), path)
        # The same file, its GPU part mapped onto the CPU.
        model = Net()
        reference = copy.deepcopy(model)
        placed = placer_torch.apply(model, path, device_map={"cuda:0": "cpu"})
        self.assert_same_step(placed, reference)

    def test_remove_gives_the_module_back(self):
        model = Net()
        placed = placer_torch.apply(model, self.searched)
        self.assertIs(placed.remove(), model)
        self.assertFalse(model._forward_hooks)
        self.assertFalse(model._forward_pre_hooks)


class PipelineTest(unittest.TestCase):
    """Pipelined placements (micro_batches: M, as `placer search` writes them for its
    search.micro_batches) on the op names of Net's export, without running placer: stem and
    block1 on cpu:0, the rest on cpu:1, two stages."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        onnx = os.path.join(cls.dir.name, "net.onnx")
        export(Net(), onnx, torch.randn(2, 3, 12, 12))
        cls.ops = export_ops(onnx)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def setUp(self):
        torch.manual_seed(1)
        self.images = torch.randn(BATCH, 3, 12, 12)
        self.labels = torch.randint(0, 10, (BATCH,))

    def pipeline(self, micro_batches, schedule=None, name="pipe.yaml", device_of=None):
        def two_stages(op, k):
            return "cpu:0" if op.startswith(("/stem/", "/block1/")) else "cpu:1"

        return write_placement(os.path.join(self.dir.name, name), self.ops,
                               device_of or two_stages, micro_batches=micro_batches,
                               schedule=schedule)

    def assert_steps_train_as(self, placed, model, reference):
        """Two SGD steps with momentum (the second depends on the first's gradients) of
        `placed.step` and of the unplaced `reference`: the same loss, every gradient and every
        updated parameter of `model`, within rtol 1e-5 and atol 1e-6."""
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
                      for m in (placed, reference)]
        for _ in range(2):
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss = placed.step(self.images, self.labels, F.cross_entropy)
            ref_loss = F.cross_entropy(reference(self.images), self.labels)
            ref_loss.backward()
            torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-5, atol=1e-6)
            for p, r in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(p.grad, r.grad, rtol=1e-5, atol=1e-6)
            for optimizer in optimizers:
                optimizer.step()
        for p, r in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)

    def test_pipelines_train_as_the_unplaced_model(self):
        # Two SGD steps (momentum, so that the second depends on the first's gradients): the
        # loss, every gradient and every updated parameter as the unplaced model's, within
        # rtol 1e-5 and atol 1e-6 as the tests above. The micro-batches add up their gradients
        # in another order than one batch does: float32 rounding, up to 7e-7 on the conv
        # biases' gradients (sums over every pixel of the minibatch).
        for micro_batches in (2, 3):
            for schedule in ("gpipe", "1f1b"):
                with self.subTest(micro_batches=micro_batches, schedule=schedule):
                    path = self.pipeline(micro_batches, schedule)
                    model = Net()
                    reference = copy.deepcopy(model)
                    placed = placer_torch.apply(model, path)
                    self.assertEqual((placed.micro_batches, placed.stages), (micro_batches, 2))
                    self.assert_steps_train_as(placed, model, reference)
                    # Each micro-batch comes in to the stem and crosses to cpu:1 once; the
                    # losses are on cpu:1, the loss's device.
                    self.assertEqual(placed.transfers, {("host", "cpu:0"): micro_batches,
                                                        ("cpu:0", "cpu:1"): micro_batches})

    def test_replicated_pipelines_train_as_the_unplaced_model(self):
        # Two replicas of three micro-batches (one row each), replica r's stages on cpu:2r and
        # cpu:2r+1: two SGD steps with momentum give the unplaced model's losses, gradients and
        # parameters, under both schedules.
        def stages(op, k):
            replica = k // 3
            first = op.startswith(("/stem/", "/block1/"))
            return f"cpu:{2 * replica + (0 if first else 1)}"

        for schedule in ("gpipe", "1f1b"):
            with self.subTest(schedule=schedule):
                path = write_placement(os.path.join(self.dir.name, "replicated.yaml"), self.ops,
                                       stages, replicas=2, micro_batches=3, schedule=schedule,
                                       devices=("cpu:0", "cpu:1", "cpu:2", "cpu:3"))
                model = Net()
                reference = copy.deepcopy(model)
                placed = placer_torch.apply(model, path)
                self.assertEqual((placed.replicas, placed.micro_batches, placed.stages), (2, 3, 2))
                self.assertEqual(placed.device_of("head", 5), "cpu:3")
                self.assert_steps_train_as(placed, model, reference)
                # Each replica's pipeline in the schedule's order, replica 0's first.
                expected = [(kind, r * 3 + k) for r in range(2)
                            for kind, k in placer_torch.pipeline_order(schedule, 3, 2)]
                self.assertEqual(placed.order, expected)
                # Every micro-batch comes in to its replica's stem and crosses to its second
                # stage once.
                self.assertEqual(placed.transfers, {("host", "cpu:0"): 3, ("cpu:0", "cpu:1"): 3,
                                                    ("host", "cpu:2"): 3, ("cpu:2", "cpu:3"): 3})

    def test_a_plain_call_runs_the_micro_batches_and_concatenates_them(self):
        path = self.pipeline(3, "1f1b")
        model = Net()
        reference = copy.deepcopy(model)
        placed = placer_torch.apply(model, path)
        logits = placed(self.images)
        self.assertEqual(logits.shape, (BATCH, 10))
        torch.testing.assert_close(logits, reference(self.images), rtol=1e-5, atol=1e-6)
        F.cross_entropy(logits, self.labels).backward()
        F.cross_entropy(reference(self.images), self.labels).backward()
        for p, r in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, r.grad, rtol=1e-5, atol=1e-6)
        self.assertEqual(placed.transfers, {("host", "cpu:0"): 3, ("cpu:0", "cpu:1"): 3})

    def test_each_micro_batch_runs_where_the_file_places_it(self):
        # Micro-batch 1 runs the model's own code (its Concat and Flatten, no parameters) on
        # cpu:0, micro-batch 0 on cpu:1 with the branches, pooling and head.
        def device_of(op, k):
            first = ("/stem/", "/block1/") + (("/Concat", "/Flatten") if k == 1 else ())
            return "cpu:0" if op.startswith(first) else "cpu:1"

        model = Net()
        reference = copy.deepcopy(model)
        placed = placer_torch.apply(model, self.pipeline(2, device_of=device_of, name="own.yaml"))
        self.assertEqual((placed.device_of("", 0), placed.device_of("", 1)), ("cpu:1", "cpu:0"))
        loss = placed.step(self.images, self.labels, F.cross_entropy)
        torch.testing.assert_close(loss, F.cross_entropy(reference(self.images), self.labels),
                                   rtol=1e-5, atol=1e-6)
        # Micro-batch 1: the two branches' outputs come to cpu:0 for the Concat, which goes back
        # to cpu:1 for the pooling, whose output comes to cpu:0 for the Flatten, which goes to
        # the head on cpu:1; micro-batch 0 crosses once, as in the two-stage split.
        self.assertEqual(placed.transfers, {("host", "cpu:0"): 2, ("cpu:0", "cpu:1"): 4,
                                            ("cpu:1", "cpu:0"): 3})

    def ran(self, path):
        """The passes a step of `path` ran, as placed.order records them and as the model saw
        them: the stem's forward call of micro-batch k, then the gradient of its output."""
        model = Net()
        seen = []

        def forward_hook(module, args, output):
            k = sum(1 for kind, _ in seen if kind == "F")
            seen.append(("F", k))
            output.register_hook(lambda grad: seen.append(("B", k)))

        model.stem.register_forward_hook(forward_hook)
        placed = placer_torch.apply(model, path)
        placed.step(self.images, self.labels, F.cross_entropy)
        self.assertEqual(placed.order, seen)
        return placed.order

    def test_one_f_one_b_order(self):
        # Two stages, three micro-batches. Stage 0 (cpu:0) holds at most two micro-batches
        # between their forward and their backward (placer's in-flight limit, stages - stage):
        # it warms up with F0 and F1; F2 must wait for B0, which runs first; then B1, B2 drain.
        order = self.ran(self.pipeline(3, "1f1b"))
        self.assertEqual(order, [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)])

    def test_gpipe_order(self):
        # Every forward, then every backward; schedule absent is GPipe, as in placer.
        expected = [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2)]
        self.assertEqual(self.ran(self.pipeline(3, "gpipe")), expected)
        self.assertEqual(self.ran(self.pipeline(3)), expected)

    def test_step_runs_a_file_without_micro_batches_as_one(self):
        # One pass each way, the plain step's loss and gradients; replicas too (M = 1), each on
        # its shard and worker, replica 1's logits coming to replica 0's loss.
        cases = {1: {("host", "cpu:0"): 1},
                 2: {("host", "cpu:0"): 1, ("host", "cpu:1"): 1, ("cpu:1", "cpu:0"): 1}}
        for replicas, transfers in cases.items():
            with self.subTest(replicas=replicas):
                path = write_placement(os.path.join(self.dir.name, "plain.yaml"), self.ops,
                                       lambda op, k: f"cpu:{k}", replicas=replicas)
                model = Net()
                reference = copy.deepcopy(model)
                placed = placer_torch.apply(model, path)
                loss = placed.step(self.images, self.labels, F.cross_entropy)
                self.assertEqual(placed.order, [("F", 0), ("B", 0)])
                self.assertEqual(placed.transfers, transfers)
                ref_loss = F.cross_entropy(reference(self.images), self.labels)
                ref_loss.backward()
                torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-5, atol=1e-6)
                for p, r in zip(model.parameters(), reference.parameters()):
                    torch.testing.assert_close(p.grad, r.grad, rtol=1e-5, atol=1e-6)

    def test_a_micro_batch_count_that_does_not_divide_the_batch_is_an_error(self):
        path = self.pipeline(4, "1f1b", name="four.yaml")
        placed = placer_torch.apply(Net(), path)
        message = r"four.yaml: micro_batches: 4 does not divide the minibatch of 6 rows"
        with self.assertRaisesRegex(PlacementError, message):
            placed.step(self.images, self.labels, F.cross_entropy)
        with self.assertRaisesRegex(PlacementError, message):
            placed(self.images)
        with self.assertRaisesRegex(ValueError, "step: the target has 5 rows, the inputs 6"):
            placer_torch.apply(Net(), self.pipeline(2)).step(self.images, self.labels[:5],
                                                             F.cross_entropy)

    def test_bad_pipelines_are_errors_naming_file_and_key(self):
        cases = [
            ({"schedule": "interleaved"}, "'schedule' must be gpipe or 1f1b, got 'interleaved'"),
            ({"micro_batches": 0}, "'micro_batches' must be an integer >= 1, got 0"),
            ({"micro_batches": -2}, "'micro_batches' must be an integer >= 1, got -2"),
            ({"replicas": 2}, "is not named r<replica>/m<micro-batch>/<op> with a replica below 2"),
        ]
        for change, expected in cases:
            with self.subTest(change=change):
                path = self.pipeline(2, "gpipe", name="bad.yaml")
                with open(path) as f:
                    data = yaml.safe_load(f)
                data.update(change)
                with open(path, "w") as f:
                    yaml.safe_dump(data, f)
                with self.assertRaises(PlacementError) as caught:
                    placer_torch.apply(Net(), path)
                self.assertIn(path, str(caught.exception))
                self.assertIn(expected, str(caught.exception))

    def test_micro_batches_share_one_copy_of_the_parameters(self):
        # Micro-batch 1 runs the head on cpu:0, micro-batch 0 on cpu:1: its parameters would
        # need to be in two places.
        def device_of(op, k):
            return "cpu:0" if op.startswith(("/stem/", "/block1/")) or (
                k == 1 and op.startswith("/head/")) else "cpu:1"

        path = self.pipeline(2, device_of=device_of, name="apart.yaml")
        with self.assertRaisesRegex(PlacementError, r"apart.yaml \(micro-batch 1\): module "
                                                    r"'head' keeps its parameters on cpu:0, but "
                                                    r"on cpu:1 in its pipeline's micro-batch 0"):
            placer_torch.apply(Net(), path)


if __name__ == "__main__":
    unittest.main()
