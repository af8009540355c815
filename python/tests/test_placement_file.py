"""Reading placement files, and mapping placer's op names to modules."""

import os
import tempfile
import unittest

import torchvision

from placer_torch import PlacementError, read_placement_file
from placer_torch.module_map import OpSite, op_site


class PlacementFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, text):
        path = os.path.join(self.dir.name, "p.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_reads_what_placer_search_writes(self):
        path = self.write(
            "# best placement found by placer search: 1 ms per step (simulated)\n"
            "model: net\nstep_time_seconds: 0.001\ndevices: [cpu:0, cuda:0]\nreplicas: 2\n"
            "placement:\n  r0//fc/Gemm: cpu:0\n  r0/loss: 1\n  r1//fc/Gemm: cuda:0\n"
            "  r1/loss: cuda:0\n")
        placement = read_placement_file(path)
        self.assertEqual(placement.devices, ["cpu:0", "cuda:0"])
        self.assertEqual(placement.replicas, 2)
        self.assertEqual(placement.ops, [{"/fc/Gemm": "cpu:0", "loss": "cuda:0"},
                                         {"/fc/Gemm": "cuda:0", "loss": "cuda:0"}])

    def test_reads_a_pipeline_as_placer_search_writes_it(self):
        # graph::PlacementToYaml: micro_batches and schedule after devices, micro-batch k's ops
        # named "m<k>/<op>" (graph::MicroBatchName).
        path = self.write(
            "# best placement found by placer search: 1 ms per step (simulated)\n"
            "model: net\nstep_time_seconds: 0.001\ndevices: [cpu:0, cpu:1]\nmicro_batches: 2\n"
            "schedule: 1f1b\nplacement:\n  m0//fc/Gemm: cpu:0\n  m0/loss: cpu:1\n"
            "  m1//fc/Gemm: cpu:0\n  m1/loss: cpu:1\n")
        placement = read_placement_file(path)
        self.assertEqual((placement.replicas, placement.micro_batches, placement.schedule),
                         (1, 2, "1f1b"))
        self.assertEqual(placement.ops, [{"/fc/Gemm": "cpu:0", "loss": "cpu:1"},
                                         {"/fc/Gemm": "cpu:0", "loss": "cpu:1"}])
        # Without the keys: one micro-batch, GPipe (graph::ReadPlacementPipeline's defaults).
        placement = read_placement_file(self.write("devices: [cpu:0]\nplacement: {a: 0}\n"))
        self.assertEqual((placement.micro_batches, placement.schedule), (1, "gpipe"))

    def test_reads_a_tensor_parallel_split_as_placer_search_writes_it(self):
        # graph::PlacementToYaml: tensor_ways after replicas; replica r's shard s of an op named
        # "r<r>/tp<s>/<op>", the ops no split reaches "r<r>/<op>" (tensor_parallel.py reads them).
        path = self.write(
            "devices: [cpu:0, cpu:1, cpu:2, cpu:3]\nreplicas: 2\ntensor_ways: 2\nplacement:\n"
            "  r0/tp0//fc/Gemm: 0\n  r0/tp1//fc/Gemm: 1\n  r0/loss: 0\n"
            "  r1/tp0//fc/Gemm: 2\n  r1/tp1//fc/Gemm: 3\n  r1/loss: 2\n")
        placement = read_placement_file(path)
        self.assertEqual((placement.replicas, placement.tensor_ways), (2, 2))
        self.assertEqual(placement.ops[1], {"tp0//fc/Gemm": "cpu:2", "tp1//fc/Gemm": "cpu:3",
                                            "loss": "cpu:2"})
        # One replica is named r0 too (the Megatron step's names).
        path = self.write("devices: [cpu:0, cpu:1]\ntensor_ways: 2\nplacement:\n"
                          "  r0/tp0//fc/Gemm: 0\n  r0/tp1//fc/Gemm: 1\n  r0/loss: 0\n")
        self.assertEqual(read_placement_file(path).ops,
                         [{"tp0//fc/Gemm": "cpu:0", "tp1//fc/Gemm": "cpu:1", "loss": "cpu:0"}])

    def test_bad_files_are_errors_naming_file_and_key(self):
        cases = [
            ("devices: [cpu:0]\nplacement: [", "not valid YAML"),
            ("- a\n", "expected a mapping"),
            ("placement: {a: cpu:0}\n", "'devices' must be"),
            ("devices: [cpu:0, cpu:0]\nplacement: {a: 0}\n", "lists a device twice"),
            ("devices: [cpu:0]\nplacement: {a: cpu:7}\n", "placement: a: unknown device 'cpu:7'"),
            ("devices: [cpu:0]\nplacement: {a: 3}\n", "device index 3 is out of range"),
            ("devices: [cpu:0]\nplacement: {}\n", "'placement' must map"),
            ("devices: [cpu:0]\nreplicas: 0\nplacement: {a: 0}\n", "'replicas' must be"),
            ("devices: [cpu:0]\nreplicas: 2\nplacement: {a: 0}\n", "op 'a' is not named r<"),
            ("devices: [cpu:0]\nreplicas: 2\nplacement: {r0/a: 0, r1/b: 0}\n",
             "replicas 0 and 1 do not hold the same ops"),
            ("devices: [cpu:0]\nrules: [{match: '*', device: 0}]\nplacement: {a: 0}\n",
             "'rules' needs the model's whole op list"),
            ("devices: [cpu:0]\nplacement: {a: 0}\nsurprise: 1\n", "unknown key 'surprise'"),
            ("devices: [cpu:0]\nmicro_batches: 0\nplacement: {m0/a: 0}\n",
             "'micro_batches' must be an integer >= 1, got 0"),
            ("devices: [cpu:0]\nmicro_batches: two\nplacement: {m0/a: 0}\n",
             "'micro_batches' must be an integer >= 1, got 'two'"),
            ("devices: [cpu:0]\nmicro_batches: 2\nschedule: pipedream\n"
             "placement: {m0/a: 0, m1/a: 0}\n",
             "'schedule' must be gpipe or 1f1b, got 'pipedream'"),
            ("devices: [cpu:0]\nmicro_batches: 2\nplacement: {m0/a: 0, a: 0}\n",
             "op 'a' is not named m<micro-batch>/<op> with a micro-batch below 2"),
            ("devices: [cpu:0]\nmicro_batches: 2\nplacement: {m0/a: 0, m2/a: 0}\n",
             "op 'm2/a' is not named m<micro-batch>/<op> with a micro-batch below 2"),
            ("devices: [cpu:0]\nmicro_batches: 2\nplacement: {m0/a: 0, m1/b: 0}\n",
             "micro-batches 0 and 1 do not hold the same ops (op 'a')"),
            ("devices: [cpu:0]\nreplicas: 2\nmicro_batches: 2\nplacement: {r0/a: 0}\n",
             "op 'r0/a' is not named r<replica>/m<micro-batch>/<op> with a replica below 2 and a "
             "micro-batch below 2"),
            ("devices: [cpu:0]\nreplicas: 2\nmicro_batches: 2\nplacement: {r0/m2/a: 0}\n",
             "op 'r0/m2/a' is not named r<replica>/m<micro-batch>/<op>"),
            ("devices: [cpu:0]\nreplicas: 2\nmicro_batches: 2\n"
             "placement: {r0/m0/a: 0, r0/m1/a: 0, r1/m0/a: 0, r1/m1/b: 0}\n",
             "replica 0's micro-batch 0 and replica 1's micro-batch 1 do not hold the same ops"),
            ("devices: [cpu:0, cpu:1]\ntensor_ways: 2\nplacement: {r0/tp0/q: 0, r0/tp2/q: 1}\n",
             "op 'tp2/q' is shard 2 of a split op, but the file has 'tensor_ways: 2' (shards tp0 "
             "to tp1)"),
            ("devices: [cpu:0, cpu:1]\ntensor_ways: 2\nplacement: {tp0/q: 0}\n",
             "op 'tp0/q' is not named r<replica>/<op> with a replica below 1, as a file with "
             "'tensor_ways: 2' must"),
            ("devices: [cpu:0]\ntensor_ways: 0\nplacement: {q: 0}\n",
             "'tensor_ways' must be an integer >= 1, got 0"),
        ]
        for text, expected in cases:
            with self.subTest(text=text):
                path = self.write(text)
                with self.assertRaises(PlacementError) as caught:
                    read_placement_file(path)
                self.assertIn(path, str(caught.exception))
                self.assertIn(expected, str(caught.exception))

    def test_a_missing_file_is_an_error_naming_it(self):
        with self.assertRaisesRegex(PlacementError, "cannot read placement file .*nothing.yaml"):
            read_placement_file(os.path.join(self.dir.name, "nothing.yaml"))


class OpSiteTest(unittest.TestCase):
    """The ONNX exporter's scopes, as torchvision's ResNet-18 and MobileNetV2 get them."""

    @classmethod
    def setUpClass(cls):
        cls.resnet = dict(torchvision.models.resnet18(num_classes=10).named_modules())
        cls.mobilenet = dict(torchvision.models.mobilenet_v2(num_classes=10).named_modules())

    def test_scopes_name_module_calls(self):
        self.assertEqual(op_site("/layer1/layer1.0/conv1/Conv", self.resnet),
                         OpSite(scope=(("layer1", 0), ("layer1.0", 0), ("layer1.0.conv1", 0))))
        # The second call of one ReLU module in a block.
        self.assertEqual(op_site("/layer2/layer2.1/relu_1/Relu", self.resnet),
                         OpSite(scope=(("layer2", 0), ("layer2.1", 0), ("layer2.1.relu", 1))))
        # The block's own code, and the model's.
        self.assertEqual(op_site("/layer1/layer1.0/Add", self.resnet).scope[-1], ("layer1.0", 0))
        self.assertEqual(op_site("/Flatten", self.resnet), OpSite(scope=()))
        # Ops placer's loader splits a node into, and names made unique.
        self.assertEqual(op_site("/fc/Gemm/alpha", self.resnet).scope, (("fc", 0),))
        self.assertEqual(op_site("/fc/Gemm#2", self.resnet).scope, (("fc", 0),))
        # Scopes relative to an enclosing module other than the parent.
        self.assertEqual(
            op_site("/features/features.1/conv/conv.0/conv.0.0/Conv", self.mobilenet).scope,
            (("features", 0), ("features.1", 0), ("features.1.conv", 0),
             ("features.1.conv.0", 0), ("features.1.conv.0.0", 0)))
        self.assertTrue(
            op_site("/features/features.0/features.0.2/Constant_1", self.mobilenet).constant)

    def test_names_without_a_module_path(self):
        self.assertEqual(op_site("fc", self.resnet), OpSite(scope=(("fc", 0),)))
        self.assertIsNone(op_site("relu3", self.resnet))

    def test_a_scope_naming_no_module_is_an_error(self):
        with self.assertRaisesRegex(PlacementError,
                                    "op '/layer1/layer1.9/conv1/Conv': 'layer1.9' names no "
                                    "submodule of 'layer1'"):
            op_site("/layer1/layer1.9/conv1/Conv", self.resnet)


if __name__ == "__main__":
    unittest.main()
