"""Summary records: one row per configuration of a table derived from other records or from the
simulator. A summary file names its table in its metadata (``table``); each table declares its
columns:

``calibration_check``  ``xstage calibrate``'s check.parquet: per calibration point, the measured
                       T_iss and period beside the fitted model's (full Burst-Gap law and Eq. 3).
``moe_sweep``          ``xstage sweep moe --out``: per catalog configuration, expert-wave and
                       interleaved replays (makespans, spans, stalls) and the design tests. The
                       sweep's rows are JSON-keyed (``wave_us``); the file spells them ``wave(us)``
                       (``spelling.column_name`` on save, ``spelling.json_key`` back on read).
``fa_sweep``           ``xstage sweep fa --out``: per shape and sequence length, FA-only, fused and
                       completion-coupled replays and the model's residuals.
``frame``              a dashboard page's frame saved by the compare layer (``compare/store.py``): its
                       columns are the page's; none are required and their spelling is not checked.
``compare``            ``xstage compare --out``: measured and simulated rows side by side, per experiment;
                       its columns are the experiment's; none are required.

Schema version 1 summaries named no table (and calibration points were summaries too): a reader
asking for a table gets it checked against that table's columns.
"""

KIND = "summary"

COLUMNS = ()     # every summary row carries its table's columns (below)

TABLES = {
    "calibration_check": (
        ("phase", ""), ("mode", ""), ("gap_kind", ""), ("producers", "count"), ("bytes_per_producer", "bytes"),
        ("gap(us)", "us"), ("gap_measured(us)", "us"), ("T_iss(us)", "us"), ("period(us)", "us"),
        ("model_T_iss(us)", "us"), ("model_period(us)", "us"), ("T_iss0(us)", "us"), ("Q(bytes)", "bytes"),
        ("rel_err_T_iss", "ratio"), ("rel_err_period", "ratio"),
    ),
    "moe_sweep": (
        ("config", ""), ("model", ""), ("precision", ""), ("routing", ""), ("setting", ""),
        ("rows", "count"), ("lead_rows", "count"), ("num_sms", "count"), ("staging_slots", "count"),
        ("tiles", "count"), ("wave(us)", "us"), ("int(us)", "us"), ("speedup", "ratio"),
    ),
    "fa_sweep": (
        ("shape", ""), ("M", "count"), ("heads", "count"), ("tiles", "count"),
        ("fa(us)", "us"), ("fused(us)", "us"), ("coupled(us)", "us"), ("serial(us)", "us"),
        ("E_res(us)", "us"), ("E_cc(us)", "us"), ("hiding_ratio", "ratio"),
    ),
    "frame": (),
    "compare": (),
}

# tables whose columns are their producer's (a page's frame, one experiment's comparison): nothing required
FREE_FORM = ("frame", "compare")
