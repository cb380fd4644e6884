"""Draw every dashboard page into one folder (offline: plotly.min.js is written beside the pages).

    from xstage.compare.collect import collect
    from xstage.dashboards.build import build_dashboards
    index = build_dashboards(Path("out/dash"), collect())     # data/ of the checkout, every platform

Pages: index, calibration-<platform> and whatif-<platform> for each platform, timeline, spans, moe,
attention, compare, heldout. The frames (``xstage.compare.collect``) are written once into ``frames/`` of the
folder as records (``xstage.compare.store``) and every page is drawn from what was saved: this
package draws, it neither simulates nor compares. A page whose records don't exist shows a "No data
yet: run ..." note instead of failing. The folder is built beside its final path and renamed into
place; an existing one is replaced (stale pages and all) only with ``overwrite``.
"""

import html
from pathlib import Path

from xstage.compare.store import load_frames, save_frames, write_folder
from xstage.dashboards import (page_attention, page_calibration, page_compare, page_heldout, page_moe, page_spans,
                               page_timeline, page_whatif)
from xstage.dashboards.html import Page, write_page, write_plotly_js

FRAMES = "frames"

DESCRIPTIONS = {
    "calibration": "Fig. 3 a-d: issue time and period vs gap, the isolated-burst knee, the drain-rate fit",
    "whatif": "sliders for K, B, G, R, Q over model and simulator curves",
    "timeline": "Fig. 9: per-SM Gantt, Tensor-Core activity, X-Stage occupancy; expert-wave vs interleaved",
    "spans": "Fig. 10 and Table 2: L2 remote-store spans and the per-tile stall test",
    "moe": "Fig. 8: interleaved over expert-wave speedups across configurations",
    "attention": "Fig. 11 and Table 3: FlashAttention + All-to-All residual and speedup vs M",
    "compare": "simulated vs measured: error metrics and parity plots",
    "heldout": "every calibration's held-out (K, B) pairs: errors against the capacity knee, per-pair maps",
}


def make_pages(collected: dict) -> list[Page]:
    """Every page except the index, in navigation order."""
    pages = []
    for name in collected["platforms"]:
        pages.append(page_calibration.calibration_page(collected["calibration"][name], name))
        wi = page_whatif.whatif_page(collected["whatif"][name])
        wi.name = f"whatif-{name}"
        pages.append(wi)
    pages.append(page_timeline.timeline_page(collected["timeline"]))
    pages.append(page_spans.spans_page(collected["spans"]))
    pages.append(page_moe.moe_page(collected["moe"]))
    pages.append(page_attention.attention_page(collected["attention"]))
    pages.append(page_compare.compare_page(collected))
    if "heldout" in collected:          # frames saved before the page existed lack it
        pages.append(page_heldout.heldout_page(collected["heldout"]))
    return pages


def index_page(collected: dict, pages: list[Page]) -> Page:
    index = Page("index", "xstage dashboards",
                 lead=f"Records folder: {collected['data_dir']}. Platforms: {', '.join(collected['platforms'])}. "
                      f"Simulated pages use {collected['primary']}"
                      + (" (quick grids: a preview)" if collected.get("quick") else "") + ".")
    items = []
    for p in pages:
        key = p.name.split("-")[0]
        status = ("model and simulator" if key == "whatif" else
                  "measured + simulated" if not p.nodata else "simulated only (no measured records yet)")
        items.append(f'<li><a href="{html.escape(p.name)}.html">{html.escape(p.title)}</a> -- '
                     f"{html.escape(DESCRIPTIONS.get(key, ''))} <i>[{status}]</i></li>")
    index.raw("<ul>" + "\n".join(items) + "</ul>")
    if collected["errors"].empty:
        index.no_data("measured-vs-simulated comparisons", "xstage calibrate (bursts) or the GPU benchmarks")
    else:
        index.table(collected["errors"], "simulated vs measured: error metrics", open_=True)
    return index


def draw_pages(out_dir: Path, collected: dict, *, probe: bool = False) -> Path:
    """Write plotly.min.js and every page of ``collected`` into the existing folder ``out_dir``; the index's
    path. ``probe``: pages carry the browser test's probe (``xstage.dashboards.html``)."""
    pages = make_pages(collected)
    index = index_page(collected, pages)
    nav = [("index.html", "index")] + [(f"{p.name}.html", p.name) for p in pages]
    write_plotly_js(out_dir)
    for p in pages:
        write_page(p, out_dir, nav, probe=probe)
    return write_page(index, out_dir, nav, probe=probe)


def build_dashboards(out_dir: Path, collected: dict, *, inputs: str = "", overwrite: bool = False,
                     probe: bool = False) -> Path:
    """Replace ``out_dir`` by ``frames/`` (``collected`` saved as records, fingerprint ``inputs``) and the
    pages drawn from those saved frames; returns the index page's path."""
    out_dir = Path(out_dir)

    def build(tmp: Path):
        save_frames(tmp / FRAMES, collected, inputs=inputs)
        draw_pages(tmp, load_frames(tmp / FRAMES), probe=probe)

    write_folder(out_dir, build, overwrite=overwrite)
    return out_dir / "index.html"
