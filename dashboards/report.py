"""``xstage report``: a markdown summary with the tables behind every dashboard page.

A reader without a browser sees the same numbers: each page's ``tables()`` (the frames it draws,
reduced to the rows a reader needs) printed as markdown tables, in page order.
"""

import math
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.dashboards import (page_attention, page_calibration, page_compare, page_heldout, page_moe, page_spans,
                               page_timeline)
from xstage.dashboards.html import write_text
from xstage.errors import InputError

MAX_ROWS = 60


def _cell(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return ""
        if float(v).is_integer() and abs(v) < 1e12:
            return str(int(v))
        return f"{v:.4g}"
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame, max_rows: int = MAX_ROWS) -> str:
    """A GitHub-flavoured markdown table (first ``max_rows`` rows, with a note when cut)."""
    if frame is None or frame.empty:
        return "_(no rows)_\n"
    shown = frame.head(max_rows)
    head = "| " + " | ".join(_cell(c) for c in shown.columns) + " |"
    sep = "|" + "|".join("---" for _ in shown.columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    more = f"\n_first {max_rows} of {len(frame)} rows_\n" if len(frame) > max_rows else ""
    return "\n".join([head, sep, *body]) + "\n" + more


def _whatif_tables(frames: dict) -> dict:
    """The explorer's grid at the platform's own R and Q (the full grid is on the page)."""
    per = frames["periodic"]
    axes = frames["axes"]
    r_mid = axes["drain_rate(GBps)"][len(axes["drain_rate(GBps)"]) // 2]
    q_mid = axes["capacity(MiB)"][len(axes["capacity(MiB)"]) // 2]
    sel = per[(per["drain_rate(GBps)"] == r_mid) & (per["capacity(MiB)"] == q_mid)]
    cols = ["producers", "bytes_per_producer", "gap(us)", "model_issue(us)", "sim_issue(us)", "model_period(us)",
            "sim_period(us)", "rate_bound_ok", "capacity_bound_ok"]
    return {f"grid at R = {r_mid} GB/s, Q = {q_mid} MiB (model vs simulator)": sel[cols]}


def report_markdown(collected: dict) -> str:
    """The whole report as one markdown string."""
    lines = ["# xstage report", "",
             f"Records folder: `{collected['data_dir']}`; platforms: {', '.join(collected['platforms'])}; "
             f"simulated pages use `{collected['primary']}`" + (" (quick grids)" if collected.get("quick") else "")
             + ". The same tables are behind the dashboard pages (`xstage dashboard`).", ""]
    sections = []
    for name in collected["platforms"]:
        sections.append((f"Calibration (Fig. 3 a-d): {name}", page_calibration.tables(collected["calibration"][name]),
                         "calibration" in collected and "compare" not in collected["calibration"][name]))
        sections.append((f"What-if explorer: {name}", _whatif_tables(collected["whatif"][name]), False))
    sections += [
        (f"Schedule timeline (Fig. 9): {collected['timeline']['config']}", page_timeline.tables(collected["timeline"]),
         not collected["timeline"].get("hw")),
        ("Remote-store spans and stalls (Fig. 10, Table 2)", page_spans.tables(collected["spans"]),
         "hw_table2" not in collected["spans"]),
        (f"MoE speedups (Fig. 8): {collected['moe']['source']}", page_moe.tables(collected["moe"]),
         "compare" not in collected["moe"]),
        ("FlashAttention + All-to-All (Fig. 11, Table 3)", page_attention.tables(collected["attention"]),
         collected["attention"].get("hw") is None),
        ("Simulated vs measured", page_compare.tables(collected), collected["errors"].empty),
    ]
    if "heldout" in collected:
        sections.append(("Held-out validation of the calibrations", page_heldout.tables(collected["heldout"]),
                         collected["heldout"]["folders"].empty))
    for title, tables, simulated_only in sections:
        lines += [f"## {title}", ""]
        if simulated_only:
            lines += ["_No measured records yet: simulated and model values only._", ""]
        for caption, frame in tables.items():
            lines += [f"### {caption}", "", markdown_table(frame), ""]
    return "\n".join(lines)


def write_report(out_dir: Path, collected: dict, *, overwrite: bool = False) -> Path:
    """Write ``out_dir/report.md`` (to a temporary name, then renamed); an existing one only with ``overwrite``."""
    path = Path(out_dir) / "report.md"
    if path.exists() and not overwrite:
        raise InputError("--out", str(path), "already exists (pass --overwrite to replace it)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError("--out", str(path.parent), f"cannot be written ({err.strerror or err})") from None
    return write_text(path, report_markdown(collected))
