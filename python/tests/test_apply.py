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

import placer_torch
from placer_torch import PlacementError
from support import Net, base_ops, export, search, write_placement

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
        onnx = os.path.join(cls.dir.name, "net.onnx")
        torch.manual_seed(0)
        export(Net(), onnx, torch.randn(2, 3, 12, 12))
        cls.searched = search(onnx, cls.dir.name, BATCH)
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


if __name__ == "__main__":
    unittest.main()
