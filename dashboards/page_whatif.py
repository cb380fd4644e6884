"""What-if explorer: sliders for K, B, G, R and Q over a precomputed grid of model and simulator results.

The grid comes from ``xstage.compare.whatif.whatif_frames``; the page embeds it as JSON and a small
script swaps the plotted arrays when a slider moves (offline, no server).
"""

import json

import numpy as np
import plotly.graph_objects as go

from xstage.dashboards.html import Page
from xstage.dashboards.style import SERIES_STYLE

TITLE = "What-if explorer"
LEAD = ("Move the sliders: K producers each store B bytes, then compute for G; the X-Stage drains at R and holds "
        "at most Q outstanding bytes. Lines: the Burst-Gap model; open markers: the simpy simulator (steady-state "
        "median of the second half of a short run of bursts, started from an empty X-Stage, so near G* or with a "
        "large Q it may not have reached the model's steady state).")
AXES = [("producers", "K producers"), ("bytes_per_producer", "B bytes per producer"), ("gap(us)", "G gap (us)"),
        ("drain_rate(GBps)", "R drain rate (GB/s)"), ("capacity(MiB)", "Q capacity (MiB)")]
READOUT = ["T_iss0(us)", "V/R(us)", "G*(us)", "q_peak0(MiB)", "model_issue(us)", "sim_issue(us)",
           "model_period(us)", "sim_period(us)", "model_isolated_issue(us)", "rate_bound_ok", "capacity_bound_ok"]


def _round(values):
    return [None if not np.isfinite(v) else float(f"{v:.6g}") for v in np.asarray(values, dtype=float)]


def payload(frames: dict) -> dict:
    """The JSON the page's script reads: every grid point's curves, keyed by slider indices."""
    axes = frames["axes"]
    idx = {name: {v: i for i, v in enumerate(axes[name])} for name, _ in AXES}
    periodic, isolated = {}, {}
    per = frames["periodic"]
    mod = frames["model_periodic"]
    keys4 = ["producers", "bytes_per_producer", "drain_rate(GBps)", "capacity(MiB)"]
    for key, grp in per.groupby(keys4, sort=False):
        code = ",".join(str(idx[k][v]) for k, v in zip(keys4, key))
        grp = grp.sort_values("gap(us)")
        m = mod.set_index(keys4).loc[key].sort_values("gap(us)")
        readout = [[bool(v) if isinstance(v, (bool, np.bool_)) else _round([v])[0] for v in row]
                   for row in grp[READOUT].itertuples(index=False)]
        periodic[code] = {"g": _round(grp["gap(us)"]), "sim_issue": _round(grp["sim_issue(us)"]),
                          "sim_period": _round(grp["sim_period(us)"]), "model_g": _round(m["gap(us)"]),
                          "model_issue": _round(m["issue(us)"]), "model_period": _round(m["period(us)"]),
                          "coupled": _round(m["coupled_period(us)"]),
                          "isolated_floor": _round(grp["model_isolated_issue(us)"]), "readout": readout}
    keys3 = ["producers", "drain_rate(GBps)", "capacity(MiB)"]
    for key, grp in frames["isolated"].groupby(keys3, sort=False):
        code = ",".join(str(idx[k][v]) for k, v in zip(keys3, key))
        m = grp[grp["series"] == "model"].sort_values("bytes_per_producer")
        s = grp[grp["series"] == "sim"].sort_values("bytes_per_producer")
        isolated[code] = {"model_b": _round(m["bytes_per_producer"]), "model_issue": _round(m["issue(us)"]),
                          "sim_b": _round(s["bytes_per_producer"]), "sim_issue": _round(s["issue(us)"])}
    return {"axes": {name: list(map(float, axes[name])) for name, _ in AXES}, "readout_columns": READOUT,
            "periodic": periodic, "isolated": isolated}


def _initial_figures(data: dict, sel: dict):
    code4 = f"{sel['producers']},{sel['bytes_per_producer']},{sel['drain_rate(GBps)']},{sel['capacity(MiB)']}"
    code3 = f"{sel['producers']},{sel['drain_rate(GBps)']},{sel['capacity(MiB)']}"
    p, i = data["periodic"][code4], data["isolated"][code3]
    g = p["g"][sel["gap(us)"]]
    f1 = go.Figure()
    f1.add_trace(go.Scatter(x=p["model_g"], y=p["model_issue"], name="model T_iss (Eq. 3)", line_color="#2457a6",
                            **SERIES_STYLE["model"]))
    f1.add_trace(go.Scatter(x=p["model_g"], y=p["model_period"], name="model period (max law)",
                            line_color="#d1495b", **SERIES_STYLE["model"]))
    f1.add_trace(go.Scatter(x=p["model_g"], y=p["coupled"], name="completion-coupled G + V/R",
                            line_color="#d1495b", **SERIES_STYLE["coupled model"]))
    f1.add_trace(go.Scatter(x=p["g"], y=p["isolated_floor"], name="isolated floor (Eq. 7)", line_color="#7b4fa0",
                            **SERIES_STYLE["model local"]))
    f1.add_trace(go.Scatter(x=p["g"], y=p["sim_issue"], name="sim T_iss", marker_color="#2457a6",
                            **SERIES_STYLE["sim"]))
    f1.add_trace(go.Scatter(x=p["g"], y=p["sim_period"], name="sim period", marker_color="#d1495b",
                            **SERIES_STYLE["sim"]))
    f1.add_trace(go.Scatter(x=[g, g], y=[p["sim_issue"][sel["gap(us)"]], p["sim_period"][sel["gap(us)"]]],
                            name="selected G", mode="markers", marker=dict(size=14, color="#e9a03b", symbol="diamond")))
    f1.update_layout(title="periodic bursts: issue time and period vs gap", xaxis_title="gap G (us)",
                     yaxis_title="time (us)", height=440, uirevision="keep")
    b = data["axes"]["bytes_per_producer"][sel["bytes_per_producer"]]
    f2 = go.Figure()
    f2.add_trace(go.Scatter(x=i["model_b"], y=i["model_issue"], name="model T_iss^iso (Eq. 7)",
                            line_color="#2457a6", **SERIES_STYLE["model"]))
    f2.add_trace(go.Scatter(x=i["sim_b"], y=i["sim_issue"], name="sim", marker_color="#2457a6", **SERIES_STYLE["sim"]))
    f2.add_trace(go.Scatter(x=[b], y=[np.interp(b, i["model_b"], i["model_issue"])], name="selected B",
                            mode="markers", marker=dict(size=14, color="#e9a03b", symbol="diamond")))
    f2.update_layout(title="isolated burst: issue time vs bytes per producer (the capacity knee)",
                     xaxis_title="B bytes per producer", yaxis_title="issue time (us)", xaxis_type="log",
                     yaxis_type="log", height=440, uirevision="keep")
    return f1, f2


_SCRIPT = """<script>
(function () {
  var D = JSON.parse(document.getElementById('whatif-data').textContent);
  var names = %(names)s;
  function fmt(v) { return (v === null) ? '' : (typeof v === 'boolean') ? (v ? 'yes' : 'NO') : (+v).toPrecision(4); }
  function interp(x, xs, ys) {
    if (x <= xs[0]) return ys[0];
    for (var i = 1; i < xs.length; i++) if (x <= xs[i]) {
      var t = Math.log(x / xs[i - 1]) / Math.log(xs[i] / xs[i - 1]); return ys[i - 1] + t * (ys[i] - ys[i - 1]); }
    return ys[ys.length - 1];
  }
  function update() {
    var s = {};
    names.forEach(function (n) {
      var el = document.getElementById('slider-' + n.key); s[n.key] = +el.value;
      var v = D.axes[n.key][s[n.key]];
      document.getElementById('value-' + n.key).textContent = n.key === 'bytes_per_producer' ?
        (v >= 1024 ? (v / 1024) + ' KiB' : v + ' B') : String(v);
    });
    var p = D.periodic[[s.producers, s.bytes_per_producer, s['drain_rate(GBps)'], s['capacity(MiB)']].join(',')];
    var iso = D.isolated[[s.producers, s['drain_rate(GBps)'], s['capacity(MiB)']].join(',')];
    var gi = s['gap(us)'], g = p.g[gi];
    Plotly.restyle('whatif-periodic', {x: [p.model_g, p.model_g, p.model_g, p.g, p.g, p.g, [g, g]],
      y: [p.model_issue, p.model_period, p.coupled, p.isolated_floor, p.sim_issue, p.sim_period,
          [p.sim_issue[gi], p.sim_period[gi]]]});
    var b = D.axes.bytes_per_producer[s.bytes_per_producer];
    Plotly.restyle('whatif-isolated', {x: [iso.model_b, iso.sim_b, [b]],
      y: [iso.model_issue, iso.sim_issue, [interp(b, iso.model_b, iso.model_issue)]]});
    var row = p.readout[gi], head = '', cells = '';
    D.readout_columns.forEach(function (c, k) { head += '<th>' + c + '</th>'; cells += '<td>' + fmt(row[k]) + '</td>'; });
    document.getElementById('whatif-readout').innerHTML = '<tr>' + head + '</tr><tr>' + cells + '</tr>';
  }
  names.forEach(function (n) { document.getElementById('slider-' + n.key).addEventListener('input', update); });
  window.addEventListener('load', update);
})();
</script>"""


def whatif_page(frames: dict) -> Page:
    """``frames`` from ``xstage.compare.whatif.whatif_frames``."""
    data = payload(frames)
    page = Page("whatif", f"{TITLE}: {frames['platform']}", lead=LEAD)
    axes = data["axes"]
    sel = {name: (len(axes[name]) - 1 if name == "producers" else len(axes[name]) // 2) for name, _ in AXES}
    controls = []
    for name, label in AXES:
        controls.append(f'<label style="display:inline-block;margin:0 1.5em .6em 0">{label}: '
                        f'<b id="value-{name}"></b><br><input type="range" id="slider-{name}" min="0" '
                        f'max="{len(axes[name]) - 1}" step="1" value="{sel[name]}" style="width:220px"></label>')
    page.raw('<div class="controls">' + "".join(controls) + "</div>")
    f1, f2 = _initial_figures(data, sel)
    page.raw('<p class="caption">At the selected point (Eq. 10 design test: rate bound V / (T_iss0 + G) &le; R, '
             'capacity bound q_peak^0 &le; Q):</p><table class="frame" id="whatif-readout"></table>')
    page.figure(f1, div_id="whatif-periodic")
    page.figure(f2, div_id="whatif-isolated")
    page.raw('<script type="application/json" id="whatif-data">'
             + json.dumps(data, separators=(",", ":")).replace("</", "<\\/") + "</script>")
    names = json.dumps([{"key": name} for name, _ in AXES])
    page.raw(_SCRIPT % {"names": names})
    page.table(tables(frames)["grid: model and simulator at every slider position"],
               "the grid behind the sliders (model and simulator at every point)")
    return page


def tables(frames: dict) -> dict:
    return {"grid: model and simulator at every slider position": frames["periodic"]}
