"""Every dashboard page in headless Chromium: no JavaScript error, no empty plot, a screenshot each.

One headless Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages on file descriptors 3 and 4, standard library only). For each page it navigates,
waits for the page's probe (``xstage.dashboards.html``) -- which records JavaScript errors from the
first script on, moves every slider and pans every plot, then writes the plots' trace and point
counts into ``<body data-xstage-probe=...>`` -- collects ``Runtime.exceptionThrown`` events as a
second witness, and takes a screenshot into the test's tmp folder (and $XSTAGE_SCREENSHOTS if set).

Needs the Debian package ``chromium``; skips with the reason when it is not installed.
"""

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from xstage.compare.collect import collect
from xstage.dashboards.build import build_dashboards

pytestmark = pytest.mark.browser

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
PAGE_TIMEOUT_S = 60


class Chromium:
    """Headless Chromium driven over the DevTools protocol on fds 3 (commands) and 4 (replies)."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 2200):
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()

        def child_fds():
            a, b = os.dup(cmd_r), os.dup(out_w)
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--disable-dev-shm-usage",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
             "--disable-extensions", f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=child_fds, close_fds=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={**os.environ, "DBUS_SESSION_BUS_ADDRESS": "disabled:"})
        os.close(cmd_r)
        os.close(out_w)
        self._w = os.fdopen(cmd_w, "wb", buffering=0)
        self._r = os.fdopen(out_r, "rb", buffering=0)
        self._buf, self._id, self.events = b"", 0, []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Page.enable", "Runtime.enable"):
            self.send(method, session=True)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=True)

    def _read(self) -> dict:
        while b"\0" not in self._buf:
            chunk = self._r.read(1 << 16)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        self._w.write(json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def probe(self, page: Path, screenshot: Path) -> dict:
        """Load ``page``; wait for its probe; screenshot; return the probe plus thrown exceptions."""
        self.events.clear()
        self.send("Page.navigate", {"url": page.resolve().as_uri()}, session=True)
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        value = None
        while value is None and time.monotonic() < deadline:
            r = self.send("Runtime.evaluate", {"expression": "document.body && document.body.getAttribute("
                                                             "'data-xstage-probe')", "returnByValue": True},
                          session=True)
            value = r.get("result", {}).get("value")
            if value is None:
                time.sleep(0.1)
        assert value is not None, f"{page.name}: the page probe did not finish within {PAGE_TIMEOUT_S} s"
        shot = self.send("Page.captureScreenshot", {"format": "png"}, session=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        probe = json.loads(value)
        probe["exceptions"] = [e["params"]["exceptionDetails"].get("text", "") + " "
                               + str(e["params"]["exceptionDetails"].get("exception", {}).get("description", ""))
                               for e in self.events if e.get("method") == "Runtime.exceptionThrown"]
        return probe

    def close(self):
        try:
            self._w.write(json.dumps({"id": self._id + 1, "method": "Browser.close"}).encode() + b"\0")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    b = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def _dash_records():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dash_records", Path(__file__).parents[1] / "dash_records.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_page_loads_without_errors_and_draws(browser, tmp_path):
    data = _dash_records().write_measured_like(tmp_path / "data")  # every measured branch of every page
    index = build_dashboards(tmp_path / "dash", collect(data, ["paper-b200"], quick=True), probe=True)
    pages = sorted(index.parent.glob("*.html"))
    assert {p.stem for p in pages} >= {"index", "calibration-paper-b200", "whatif-paper-b200", "timeline", "spans",
                                       "moe", "attention", "compare"}
    shots = Path(os.environ["XSTAGE_SCREENSHOTS"]) if os.environ.get("XSTAGE_SCREENSHOTS") else None
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
    for page in pages:
        shot = tmp_path / f"{page.stem}.png"
        probe = browser.probe(page, shot)
        if shots:
            shutil.copy(shot, shots / shot.name)
        assert probe["errors"] == [] and probe["exceptions"] == [], \
            f"{page.name}: JavaScript errors {probe['errors']} {probe['exceptions']}"
        assert shot.stat().st_size > 10_000, f"{page.name}: blank screenshot"
        if page.stem == "index":
            continue
        assert probe["plots"], f"{page.name}: no plot on the page"
        for plot in probe["plots"]:
            assert plot["rendered"], f"{page.name}: plot {plot['id']} did not render"
            assert plot["traces"] > 0 and plot["points"] > 0, f"{page.name}: plot {plot['id']} is empty: {plot}"
            if plot["webgl_trace"]:
                assert plot["gl_canvas"], f"{page.name}: WebGL plot {plot['id']} drew no canvas"


def test_a_132_sm_by_20000_tile_timeline_opens_and_pans(browser, tmp_path):
    """2.64 M tiles: the page loads, the probe pans every plot (and back), no error, nothing empty."""
    from xstage.compare.timeline import synthetic_tiles, timeline_frames
    from xstage.dashboards.html import write_page, write_plotly_js
    from xstage.dashboards.page_timeline import timeline_page

    frames = timeline_frames(synthetic_tiles(132, 20_000), drain_rate_GBps=50.0)
    page = timeline_page({"config": "synthetic 132 x 20,000", "platform": "synthetic", "sim": {"interleaved": frames},
                          "hw": {}})
    write_plotly_js(tmp_path)
    probe = browser.probe(write_page(page, tmp_path, [("timeline.html", "timeline")], probe=True),
                          tmp_path / "big.png")
    assert probe["errors"] == [] and probe["exceptions"] == []
    assert len(probe["plots"]) == 2 and all(p["rendered"] and p["points"] > 0 for p in probe["plots"])
    assert any(p["webgl_trace"] and p["gl_canvas"] for p in probe["plots"])


def test_probe_catches_errors_and_empty_plots(browser, tmp_path):
    """The checks above must be able to fail: a page with a JavaScript error and an empty plot."""
    import plotly.graph_objects as go

    from xstage.dashboards.html import Page, write_page, write_plotly_js

    page = Page("broken", "broken on purpose")
    page.figure(go.Figure(go.Scatter(x=[], y=[])))
    page.raw("<script>window.addEventListener('load', function () { undefinedFunction(); });</script>")
    write_plotly_js(tmp_path)
    probe = browser.probe(write_page(page, tmp_path, [("broken.html", "broken")], probe=True),
                          tmp_path / "broken.png")
    assert any("undefinedFunction" in e for e in probe["errors"])
    assert any("undefinedFunction" in e for e in probe["exceptions"])
    assert probe["plots"][0]["points"] == 0

    (tmp_path / "plotly.min.js").unlink()  # a page whose plotly.js is missing fails loudly too
    probe = browser.probe(tmp_path / "broken.html", tmp_path / "broken2.png")
    assert probe["errors"] and probe["plots"] == []
