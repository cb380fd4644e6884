"""Shared look of the pages: colors, how each series is drawn, number formatting."""

COLORS = ["#2457a6", "#d1495b", "#2a9d8f", "#e9a03b", "#7b4fa0", "#4a5263", "#66a61e", "#e7298a", "#8c564b",
          "#17becf"]

# model: a line; sim: open markers; hw: filled markers; local controls dotted
SERIES_STYLE = {
    "model": dict(mode="lines", line_width=2),
    "coupled model": dict(mode="lines", line_dash="dash", line_width=1.5),
    "model local": dict(mode="lines", line_dash="dot", line_width=1.5),
    "sim": dict(mode="markers", marker_symbol="circle-open", marker_size=9, marker_line_width=2),
    "hw": dict(mode="markers", marker_symbol="circle", marker_size=8),
    "hw local": dict(mode="markers", marker_symbol="x", marker_size=8),
}

SCHEDULE_COLORS = {"expert-wave": "#d1495b", "interleaved": "#2457a6"}


def fmt_bytes(n) -> str:
    n = float(n)
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{n:.0f}B"
