#!/usr/bin/env python3
"""Renders a placer comparison report (report.html) in headless Chromium (Debian's `chromium`,
which scripts/setup.sh installs) and checks that its pictures drew:

  - the page loads with no console error, no uncaught exception and no failed load;
  - it holds, for each placement pictured, the schedule and the device strip (inline SVGs
    labelled "<method>: schedule of one step" and "<method>: device of every group"), at least
    `--pictures` of each;
  - in a screenshot of the whole page, every such SVG's area is not blank: it holds the colour
    of at least one device, and more than one colour.

It speaks the DevTools protocol to the browser over a pipe (--remote-debugging-pipe), so nothing
but the standard library and Pillow (for the screenshot) is needed. Exit status 0 when every
check passes, 1 with the reasons otherwise; `--screenshot FILE` keeps the screenshot.

    "$(placer_python)" scripts/check_report.py runs/x/report.html [--pictures 2] [--screenshot s.png]
"""

import argparse
import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# The first device colours of placer/report_svg.cc (Tableau 10); a drawn picture shows some.
DEVICE_COLOURS = [(0x4E, 0x79, 0xA7), (0xF2, 0x8E, 0x2B), (0xE1, 0x57, 0x59), (0x76, 0xB7, 0xB2),
                  (0x59, 0xA1, 0x4F), (0xED, 0xC9, 0x48), (0xB0, 0x7A, 0xA1), (0xFF, 0x9D, 0xA7),
                  (0x9C, 0x75, 0x5F), (0xBA, 0xB0, 0xAC)]
PICTURE_KINDS = ("schedule of one step", "device of every group")
TIMEOUT_S = 60


def browser_binary():
    for candidate in ("/usr/lib/chromium/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("no Chromium found: scripts/setup.sh installs Debian's chromium")


class Browser:
    """Headless Chromium driven over --remote-debugging-pipe (fd 3: commands, fd 4: replies,
    each message JSON ending in a NUL byte)."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="placer_check_report_")
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def wire():  # in the child: the protocol's two descriptors, inheritable
            # Copies first: a pipe end may itself be 3 or 4 (dup2 onto itself would leave it
            # close-on-exec, and the first dup2 could overwrite the other end).
            commands, replies = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(commands, 3)
            os.dup2(replies, 4)

        # Not pass_fds: the descriptors that closes come after preexec_fn, 3 and 4 among them.
        # Without it, the pipes' own descriptors (not inheritable) close at exec.

        args = [browser_binary(), "--headless", "--remote-debugging-pipe", "--no-sandbox",
                "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--hide-scrollbars", f"--user-data-dir={self.profile}", "--window-size=1200,900",
                "about:blank"]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        close_fds=False, preexec_fn=wire)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def close(self):
        try:
            self.send("Browser.close")
        except Exception:  # already gone: it is killed below in any case
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed the pipe")
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method):
        deadline = time.monotonic() + TIMEOUT_S
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event


def problems_in_events(events):
    problems = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            problems.append(f"uncaught exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
            problems.append(f"console {params['type']}: {' '.join(texts)}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            problems.append(f"browser log error: {entry.get('text')} {entry.get('url', '')}")
    return problems


def blank_reason(image, box):
    """Why the screenshot's area `box` (x, y, w, h) does not show a drawn picture; None if it
    does."""
    x, y, w, h = (int(round(v)) for v in box)
    if w < 10 or h < 10:
        return f"it is {w}x{h} pixels"
    region = image.crop((x, y, x + w, y + h)).convert("RGB")
    colours = region.getcolors(maxcolors=1 << 20) or []
    if len(colours) < 2:
        return "it is one colour"
    present = {colour for _, colour in colours}
    if not any(c in present for c in DEVICE_COLOURS):
        return "it shows no device colour"
    return None


def check(report, pictures, screenshot=None):
    """The problems found in `report` (a list of strings; empty when it passes) and a summary."""
    from PIL import Image

    browser = Browser()
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Page.navigate", {"url": "file://" + os.path.abspath(report)},
                     session=session)
        browser.wait_for("Page.loadEventFired")
        svgs = json.loads(browser.send("Runtime.evaluate", {
            "expression": """JSON.stringify([...document.querySelectorAll('svg')].map(s => {
                const r = s.getBoundingClientRect();
                return {label: s.getAttribute('aria-label') || '', x: r.x + scrollX,
                        y: r.y + scrollY, w: r.width, h: r.height,
                        elements: s.querySelectorAll('*').length};
            }))""", "returnByValue": True}, session=session)["result"]["value"])
        metrics = browser.send("Page.getLayoutMetrics", session=session)
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = browser.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                     "scale": 1}}, session=session)
        # Events that came after the load (late errors) are in by now.
        browser.send("Runtime.evaluate", {"expression": "1"}, session=session)
        events = list(browser.events)
    finally:
        browser.close()

    png = base64.b64decode(shot["data"])
    if screenshot:
        with open(screenshot, "wb") as f:
            f.write(png)
    image = Image.open(io.BytesIO(png))
    problems = problems_in_events(events)
    counts = {}
    for svg in svgs:
        kind = next((k for k in PICTURE_KINDS if svg["label"].endswith(k)), None)
        if kind is None:
            continue
        counts[kind] = counts.get(kind, 0) + 1
        reason = blank_reason(image, (svg["x"], svg["y"], svg["w"], svg["h"]))
        if reason is not None:
            problems.append(f"'{svg['label']}' did not draw: {reason}")
    for kind in PICTURE_KINDS:
        if counts.get(kind, 0) < pictures:
            problems.append(f"{counts.get(kind, 0)} pictures '{kind}', {pictures} expected")
    summary = (f"{report}: {len(svgs)} SVGs, " +
               ", ".join(f"{counts.get(k, 0)} '{k}'" for k in PICTURE_KINDS) +
               f", screenshot {image.width}x{image.height}")
    return problems, summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("report", help="report.html of placer compare")
    parser.add_argument("--pictures", type=int, default=2,
                        help="placements pictured at least (default 2: learned, best baseline)")
    parser.add_argument("--screenshot", help="write the page's screenshot (PNG) here")
    args = parser.parse_args()
    problems, summary = check(args.report, args.pictures, args.screenshot)
    print(summary)
    for problem in problems:
        print(f"problem: {problem}")
    print("report check: " + ("passed" if not problems else "FAILED"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
