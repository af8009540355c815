"""The comparison report in a real browser: `placer compare` on a small simulated config, then
scripts/check_report.py (headless Chromium) on its report.html; and the check itself failing on
reports broken on purpose (a script error, a blank picture, a missing picture).
PLACER_BINARY names the placer program (CTest sets it)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_report  # noqa: E402

CONFIG = """model:
  builtin: lenet
  batch_size: 64
devices: [cuda:0, cuda:1, cpu:0]
search:
  evaluator: simulated
  max_wall_seconds: 4
  policy: false
"""


# The learned placement, the best baseline and, the judge being simulated, the pipeline baseline.
PICTURES = 3


class ReportBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="placer_report_browser_test_")
        config = os.path.join(cls.dir, "compare.yaml")
        with open(config, "w") as f:
            f.write(CONFIG)
        cls.out = os.path.join(cls.dir, "out")
        result = subprocess.run([os.environ["PLACER_BINARY"], "compare", "--config", config,
                                 "--output", cls.out], capture_output=True, text=True,
                                timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"placer compare failed:\n{result.stdout}\n{result.stderr}")
        cls.report = os.path.join(cls.out, "report.html")
        with open(cls.report) as f:
            cls.html = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def variant(self, name, html):
        path = os.path.join(self.out, name)
        with open(path, "w") as f:
            f.write(html)
        return path

    def test_the_report_draws_both_pictures_of_every_placement_it_shows(self):
        problems, summary = check_report.check(self.report, pictures=PICTURES)
        self.assertEqual(problems, [], summary)

    def test_the_report_links_the_traces_it_wrote(self):
        with open(os.path.join(self.out, "report.json")) as f:
            pictures = json.load(f)["pictures"]
        self.assertEqual(len(pictures), PICTURES)
        self.assertTrue(pictures[0]["method"].startswith("learned"))
        self.assertTrue(pictures[1]["method"].startswith("best baseline: "))
        self.assertTrue(pictures[2]["method"].startswith("pipeline (M = "))
        for picture in pictures:
            self.assertEqual(len(picture["trace_files"]), 1)
            for name in picture["trace_files"]:
                self.assertIn(f'href="{name}"', self.html)
                with open(os.path.join(self.out, name)) as f:
                    events = json.load(f)["traceEvents"]
                lanes = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
                self.assertTrue(lanes & {"cuda:0", "cuda:1", "cpu:0"}, lanes)
                self.assertTrue(any(e.get("ph") == "X" for e in events))

    def test_a_script_error_fails_the_check(self):
        path = self.variant("error.html", self.html.replace(
            "</body>", "<script>document.body.appendChild(null)</script></body>"))
        problems, _ = check_report.check(path, pictures=PICTURES)
        self.assertTrue(any("uncaught exception" in p for p in problems), problems)

    def test_a_blank_picture_fails_the_check(self):
        # The first schedule without its bars: its area shows no device colour.
        start = self.html.index("schedule of one step")
        end = self.html.index("</svg>", start)
        body = self.html[start:end]
        blank = re.sub(r'fill="#(?!f2f2f2|999999)[0-9a-f]{6}"', 'fill="#ffffff"', body)
        path = self.variant("blank.html", self.html[:start] + blank + self.html[end:])
        problems, _ = check_report.check(path, pictures=PICTURES)
        self.assertTrue(any("did not draw" in p and "no device colour" in p for p in problems),
                        problems)

    def test_a_missing_picture_fails_the_check(self):
        start = self.html.index("<svg", self.html.index("<h3>best baseline"))
        end = self.html.index("</svg>", start) + len("</svg>")
        path = self.variant("missing.html", self.html[:start] + self.html[end:])
        problems, _ = check_report.check(path, pictures=PICTURES)
        self.assertTrue(any("expected" in p for p in problems), problems)


if __name__ == "__main__":
    unittest.main()
