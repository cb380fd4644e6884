"""Self-contained offline HTML pages around plotly figures.

Every page of a dashboard folder references one ``plotly.min.js`` written beside it (the copy that
ships inside the plotly Python package), so the folder works offline and each page stays small.

A page built with ``probe=True`` (the browser test asks for it; pages a user builds never carry it)
holds two more scripts: a first one records every JavaScript error (``error`` and
``unhandledrejection`` events, ``console.error``) before plotly loads; a last one, once the page has
loaded, exercises the page (moves every range slider to its maximum and back, pans every large plot
-- WebGL or heatmap -- by a tenth of its x range and back), then counts the traces and points each
plot holds and writes the result as JSON into ``<body data-xstage-probe="...">``. A browser driver
(``tests/dashboards/test_browser.py``) reads it back.

Every file is written to a temporary name beside its final one and renamed (``write_text``).
"""

import html
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

PLOTLY_JS = "plotly.min.js"

_STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 0 1.5em 3em; color: #1d2330; }
nav { position: sticky; top: 0; background: #f3f5f9; padding: .5em 1em; margin: 0 -1.5em 1em;
      border-bottom: 1px solid #d8dce5; z-index: 10; font-size: 0.92em; }
nav a { margin-right: 1.1em; text-decoration: none; color: #2457a6; }
nav a.here { font-weight: 600; color: #1d2330; }
h1 { font-size: 1.5em; margin: .4em 0 .2em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
p.lead { color: #4a5263; margin-top: 0; }
.nodata { border: 1px dashed #c0392b; background: #fdf2f0; padding: .8em 1em; border-radius: 4px; }
.nodata code { background: #fff; padding: 0 .3em; }
table.frame { border-collapse: collapse; font-size: 0.85em; margin: .5em 0; }
table.frame th, table.frame td { border: 1px solid #d8dce5; padding: 2px 7px; text-align: right; }
table.frame th { background: #f3f5f9; }
details { margin: .3em 0 1em; } summary { cursor: pointer; color: #2457a6; }
.caption { color: #4a5263; font-size: 0.92em; margin: .2em 0 1em; }
"""

_ERROR_PROBE = """<script>
window.__xstage = {errors: []};
window.addEventListener('error', function (e) {
  window.__xstage.errors.push(String(e.message || (e.target && (e.target.src || e.target.href)) || e)); }, true);
window.addEventListener('unhandledrejection', function (e) { window.__xstage.errors.push('rejection: ' + e.reason); });
(function () { var orig = console.error; console.error = function () {
  window.__xstage.errors.push('console.error: ' + Array.prototype.join.call(arguments, ' '));
  return orig.apply(console, arguments); }; })();
</script>"""

_PAGE_PROBE = """<script>
(function () {
  function npoints(t) {
    var n = 0;
    ['x', 'y', 'z', 'values', 'r'].forEach(function (k) { if (t[k] && t[k].length > n) n = t[k].length; });
    return n;
  }
  function count() {
    var out = [];
    document.querySelectorAll('.js-plotly-plot').forEach(function (gd) {
      var data = gd._fullData || [], pts = 0, gl = false;
      data.forEach(function (t) { pts += npoints(t); if (/gl$/.test(t.type)) gl = true; });
      out.push({id: gd.id, traces: data.length, points: pts, webgl_trace: gl,
                rendered: !!(gd._fullLayout && gd.querySelector('.main-svg')),
                gl_canvas: !!gd.querySelector('canvas')});
    });
    return out;
  }
  async function exercise() {
    var sliders = document.querySelectorAll('input[type=range]');
    for (var i = 0; i < sliders.length; i++) {
      var s = sliders[i], old = s.value;
      [s.max, old].forEach(function (v) { s.value = v; s.dispatchEvent(new Event('input')); });
    }
    var plots = document.querySelectorAll('.js-plotly-plot');
    for (var j = 0; j < plots.length; j++) {
      var gd = plots[j], ax = gd._fullLayout && gd._fullLayout.xaxis;
      var large = (gd._fullData || []).some(function (t) { return /gl$|heatmap/.test(t.type); });
      if (!large || !ax || !ax.range || ax.type === 'category' || ax.type === 'date') continue;
      var a = Number(ax.range[0]), b = Number(ax.range[1]), d = (b - a) / 10;
      if (!isFinite(a) || !isFinite(b)) continue;
      await Plotly.relayout(gd, {'xaxis.range': [a + d, b + d]});  // pan right, then back
      await Plotly.relayout(gd, {'xaxis.range': [a, b]});
    }
  }
  window.addEventListener('load', function () {
    var t_load = performance.now();
    setTimeout(async function () {
      var t0 = performance.now();
      try { await exercise(); } catch (e) { window.__xstage.errors.push('exercise: ' + e); }
      var t_exercise = performance.now() - t0;
      var canvas = document.createElement('canvas');
      var probe = {errors: window.__xstage.errors, plots: count(),
                   nodata: document.querySelectorAll('[data-xstage-nodata]').length,
                   webgl: !!(canvas.getContext('webgl') || canvas.getContext('experimental-webgl')),
                   load_ms: Math.round(t_load), exercise_ms: Math.round(t_exercise)};
      document.body.setAttribute('data-xstage-probe', JSON.stringify(probe));
      document.body.setAttribute('data-xstage-done', '1');
    }, 100);
  });
})();
</script>"""


@dataclass
class Page:
    """A page under construction: a title, a lead paragraph and a list of HTML blocks."""
    name: str          # file stem: ``calibration`` -> calibration.html
    title: str
    lead: str = ""
    blocks: list = field(default_factory=list)
    nodata: bool = False  # True once a section showed the "no data yet" note
    figures: int = 0

    def heading(self, text: str) -> None:
        self.blocks.append(f"<h2>{html.escape(text)}</h2>")

    def text(self, text: str, cls: str = "caption") -> None:
        self.blocks.append(f'<p class="{cls}">{html.escape(text)}</p>')

    def raw(self, fragment: str) -> None:
        self.blocks.append(fragment)

    def figure(self, fig, caption: str = "", div_id: str | None = None) -> None:
        self.figures += 1
        div_id = div_id or f"{self.name}-plot-{self.figures}"
        fig_html = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                               config={"displaylogo": False, "responsive": True})
        self.blocks.append(fig_html)
        if caption:
            self.text(caption)

    def no_data(self, what: str, command: str) -> None:
        """The clear note a section shows when its records don't exist yet."""
        self.nodata = True
        self.blocks.append(f'<div class="nodata" data-xstage-nodata="1"><b>No data yet</b> for {html.escape(what)}: '
                           f'run <code>{html.escape(command)}</code>.</div>')

    def table(self, frame: pd.DataFrame, summary: str, *, open_: bool = False, max_rows: int = 200) -> None:
        shown = frame.head(max_rows)
        body = shown.to_html(index=False, classes="frame", border=0, float_format=lambda v: f"{v:.4g}",
                             na_rep="")
        more = f"<p class='caption'>first {max_rows} of {len(frame)} rows</p>" if len(frame) > max_rows else ""
        self.blocks.append(f"<details{' open' if open_ else ''}><summary>{html.escape(summary)}</summary>"
                           f"{body}{more}</details>")


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to a temporary file beside ``path``, then rename it to ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_plotly_js(out_dir: Path) -> Path:
    """Write plotly.min.js (from the installed plotly package) once into ``out_dir``."""
    from plotly.offline import get_plotlyjs

    path = Path(out_dir) / PLOTLY_JS
    text = get_plotlyjs()
    if not path.exists() or path.stat().st_size != len(text.encode()):
        write_text(path, text)
    return path


def render(page: Page, nav: list[tuple[str, str]], *, probe: bool = False) -> str:
    """The full HTML text of ``page``; ``nav`` lists (file name, label) of every page of the folder;
    ``probe``: with the test probe's scripts."""
    links = " ".join(f'<a href="{html.escape(href)}"{" class=here" if href == page.name + ".html" else ""}>'
                     f"{html.escape(label)}</a>" for href, label in nav)
    lead = f'<p class="lead">{html.escape(page.lead)}</p>' if page.lead else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>xstage: {html.escape(page.title)}</title>{_ERROR_PROBE if probe else ''}"
            f'<script src="{PLOTLY_JS}"></script><style>{_STYLE}</style></head>\n'
            f"<body><nav>{links}</nav><h1>{html.escape(page.title)}</h1>{lead}\n"
            + "\n".join(page.blocks) + f"\n{_PAGE_PROBE if probe else ''}</body></html>\n")


def write_page(page: Page, out_dir: Path, nav: list[tuple[str, str]], *, probe: bool = False) -> Path:
    return write_text(Path(out_dir) / f"{page.name}.html", render(page, nav, probe=probe))
