"""The path of docs/python.md, on the CPU: export torchvision's SqueezeNet, `placer search` on it,
`pip install ./python`, then its training script under the placement found."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch
import torchvision

from support import export, search

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "python", "examples", "train_placed.py")


class EndToEndTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def test_readme_script_trains_squeezenet_under_the_searched_placement(self):
        onnx = os.path.join(self.dir.name, "squeezenet.onnx")
        torch.manual_seed(0)
        export(torchvision.models.squeezenet1_1(num_classes=10), onnx,
               torch.randn(2, 3, 64, 64))
        placement = search(onnx, self.dir.name, batch=16)

        # pip install ./python, from a copy (setuptools builds in the source folder), into a
        # folder of its own: no network, no build isolation, nothing but the package.
        source = shutil.copytree(os.path.join(ROOT, "python"),
                                 os.path.join(self.dir.name, "source"),
                                 ignore=shutil.ignore_patterns("__pycache__", "build",
                                                               "*.egg-info"))
        target = os.path.join(self.dir.name, "site")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                        "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
                        "--target", target, source], check=True, timeout=300)
        self.assertTrue(os.path.exists(os.path.join(target, "placer_torch", "__init__.py")))

        # The installed package, not the source folder, is what the script imports.
        env = dict(os.environ, PYTHONPATH=target)
        result = subprocess.run([sys.executable, EXAMPLE, placement], cwd=self.dir.name,
                                env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        losses = [float(line.split()[-1]) for line in result.stdout.splitlines()]
        self.assertEqual(len(losses), 5, result.stdout)
        self.assertLess(losses[-1], losses[0], result.stdout)

    def test_readme_shows_the_script(self):
        with open(os.path.join(ROOT, "docs", "python.md")) as f:
            readme = f.read()
        with open(EXAMPLE) as f:
            script = f.read()
        self.assertIn(f"```python\n{script}```", readme)


if __name__ == "__main__":
    unittest.main()
