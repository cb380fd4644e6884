"""Rule 15's post-hoc verdict (benchmarks/fa_rule15_posthoc.py): recomputed from the committed in-pair records, the
counts written in data/attention-extra/rule15-posthoc.md, below the 80 % that would have qualified it."""

from xstage.paths import data_dir

from .bench_scripts import load_script


def test_the_recorded_counts_recompute_and_miss_the_bar():
    R = load_script("fa_rule15_posthoc")
    platform, base, _ = R.F.inputs()
    pts = R.build_points(base)
    n = R.score(pts, platform)["counts"]
    assert len(pts) == 15 and n["pairs"] == 15 * 14
    recorded = (data_dir() / "attention-extra" / "rule15-posthoc.md").read_text()
    line = (f"L {n['L']} / {n['pairs']}  fused-FA inpair {n['fused_fa_inpair']} / {n['pairs']}  "
            f"fused-FA standard {n['fused_fa_standard']} / {n['standard_pairs']}")
    assert line in recorded
    assert n["L"] < 0.8 * n["pairs"] and n["fused_fa_inpair"] < 0.8 * n["pairs"]   # not qualified
