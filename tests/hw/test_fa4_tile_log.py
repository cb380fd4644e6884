"""The PersistentSm90 tile log's CPU side (hw/attention/fa4_tile_log.py: buffer indexing, decoding, per-wave figures;
the hand-over in fa4_persistent; benchmarks/fa4_tile_log_summary.py) on synthetic stamps. The logged kernel itself
runs on the GPU (benchmarks/gpu/fa4_tile_log.py)."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from xstage.hw.attention import fa4_persistent as P
from xstage.hw.attention import fa4_tile_log as T

from .test_fa4_persistent import fake_flash_attn

F = len(T.LOG_FIELDS)


def synthetic(grid=4, waves=3, loop_us=100.0, drift_us=2.0, partial=2, blocks=64, world=8):
    """A (grid, 8, F) buffer: CTA c's wave k runs [k·loop + c·drift·k, +loop) in us (range grows by
    (grid - 1)·drift per wave), sends at its end; the last wave holds ``partial`` units; m_block = unit mod blocks."""
    buf = np.zeros((grid, 8, F), dtype=np.int64)
    for k in range(waves + 1):
        for c in range(grid if k < waves else partial):
            start = 1_000_000 + int((k * loop_us + c * drift_us * k) * 1e3)
            w = buf[c, k]
            w[T.FIELD["start_ns"]], w[T.FIELD["end_ns"]] = start, start + int(loop_us * 1e3)
            w[T.FIELD["send_ns"]] = w[T.FIELD["end_ns"]]
            w[T.FIELD["m_block"]] = (c + k * grid) % blocks
            w[T.FIELD["split_word"]] = 1 << 16
    return buf


def test_word_index_is_the_c_order_of_the_buffer_shape():
    ctas, slots = 3, 5
    idx = [T.word_index(c, k, f, slots) for c in range(ctas) for k in range(slots) for f in range(F)]
    assert idx == list(range(ctas * slots * F))  # no overlap, no hole, as (ctas, slots, fields) C order
    flat = np.zeros(ctas * slots * F, dtype=np.int64)
    flat[T.word_index(2, 4, T.FIELD["end_ns"], slots)] = 7
    flat[T.word_index(2, 4, T.FIELD["head"], slots)] = 1
    cols = T.decode(flat.reshape(ctas, slots, F))
    assert cols["cta"].tolist() == [2] and cols["slot"].tolist() == [4] and cols["head"].tolist() == [1]


def test_decode_keeps_only_slots_that_ran_and_refuses_another_shape():
    cols = T.decode(synthetic())
    assert cols["slot"].size == 4 * 3 + 2
    with pytest.raises(ValueError, match="shape"):
        T.decode(np.zeros((4, 8, F - 1), dtype=np.int64))


def test_wave_spread_and_its_growth_per_wave():
    cols = T.decode(synthetic(grid=4, waves=3, loop_us=100.0, drift_us=2.0))
    waves = T.wave_spreads(cols)
    assert [w["end_range_us"] for w in waves[:3]] == pytest.approx([0.0, 6.0, 12.0])
    assert waves[1]["end_iqr_us"] == pytest.approx(3.0)  # ends 0, 2, 4, 6: quartiles 1.5 and 4.5
    assert waves[3]["units"] == 2 and waves[0]["mainloop_us"] == pytest.approx(100.0)
    d = T.drift_per_wave(waves, 4)
    assert d["full_waves"] == 3 and d["range_slope_us"] == pytest.approx(6.0)
    assert d["range_per_wave"] == pytest.approx(0.06) and d["iqr_per_wave"] == pytest.approx(0.03)
    assert T.drift_per_wave(waves[:1], 4)["range_per_wave"] is None


def test_remote_sends_leave_out_the_own_chunk_and_the_partners():
    cols = T.decode(synthetic(grid=4, waves=3, blocks=64, world=8))  # own chunk of rank 0: m_blocks 0..7
    last = T.wave_drain(cols, 3, 64, 8, 0, 52.5)
    assert last["units"] == 2 and last["remote_sends"] == 2  # m_blocks 12, 13
    first = T.wave_drain(cols, 0, 64, 8, 0, 52.5)
    assert first["remote_sends"] == 0  # m_blocks 0..3
    assert last["drain_us"] == pytest.approx(2 * T.TILE_BYTES / 52.5e3)
    cols["split_word"][cols["slot"] == 3] = T.PARTNER_WORD
    assert T.wave_drain(cols, 3, 64, 8, 0, 52.5)["remote_sends"] == 0


def test_queue_replay_counts_what_drains_after_the_last_mainloop():
    cols = T.decode(synthetic(grid=4, waves=3, loop_us=100.0, drift_us=0.0, blocks=64))
    per = T.TILE_BYTES / 52.5e3
    q = T.queue_replay(cols, 64, 8, 0, 52.5)
    # the last wave's 2 remote tiles are issued at the last mainloop end (lockstep): 2 drains after it
    assert q["link_done_after_end_us"] == pytest.approx(2 * per)
    assert q["unfinished_at_end_sends"] == 2
    cols["send_ns"][cols["slot"] == 3] -= int(10 * per * 1e3)  # sent well before the end: all drained
    assert T.queue_replay(cols, 64, 8, 0, 52.5)["link_done_after_end_us"] < 0


def test_launch_summary_names_its_waves():
    s = T.launch_summary(T.decode(synthetic()), 64, 8, 0, 52.5)
    assert s["ctas"] == 4 and s["slots"] == 4 and s["last_wave"]["slot"] == 3 and s["second_last_wave"]["slot"] == 2
    assert s["compute_span_us"] == pytest.approx(300 + 1 * 2.0 * 3 + 100)  # the last wave's CTA 1 ends last
    with pytest.raises(ValueError, match="no slot"):
        T.launch_summary(T.decode(np.zeros((2, 2, F), dtype=np.int64)), 64, 8, 0, 52.5)


def test_tile_log_buffer_is_checked_and_compiled_in(monkeypatch):
    torch = pytest.importorskip("torch", reason="needs torch (the log buffer is a torch tensor); runs in .ci/run's CPU-torch suite")
    fi, _ = fake_flash_attn(monkeypatch)
    kern = type(sys)("xstage.hw.attention.fa4_tile_log_kernel")
    kern.logged_class = lambda cls, addr, slots: f"{cls}+log{slots}"
    monkeypatch.setitem(sys.modules, "xstage.hw.attention.fa4_tile_log_kernel", kern)
    good = torch.zeros((132, 16, F), dtype=torch.int64)
    assert T.check_tile_log(good, 132) == (good.data_ptr(), 16)
    for bad in (torch.zeros((131, 16, F), dtype=torch.int64), torch.zeros((132, 16, F), dtype=torch.int32),
                torch.zeros((132, F, 16), dtype=torch.int64).transpose(1, 2)):
        with pytest.raises(ValueError, match="tile_log"):
            T.check_tile_log(bad, 132)
    with P.installed("static", "stagger", tile_log=(good.data_ptr(), 16)):
        assert fi.FlashAttentionForwardSm90 == "class-stagger+log16"
        assert fi._flash_attn_fwd.compile_cache == {}  # the address is compiled in: never the disk cache
    with P.installed("static", "stagger"):
        assert fi.FlashAttentionForwardSm90 == "class-stagger"  # the default class, its own cache
        assert fi._flash_attn_fwd.compile_cache == "cache:fwd-xstage-persistent-static-stagger"


def load_summary():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fa4_tile_log_summary.py"
    spec = importlib.util.spec_from_file_location("fa4_tile_log_summary", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_summary_of_a_run_folder(tmp_path):
    pd = pytest.importorskip("pandas")
    S = load_summary()
    from xstage.records import save_records

    frames = [pd.DataFrame(T.record_columns(T.decode(synthetic(blocks=128)), M=16384, kernel="stagger", mode="fused",
                                            launch=i, launch_us=500.0 + i, world=8, rank=0, platform="p"))
              for i in range(3)]
    save_records(tmp_path / "attention-tile.parquet", "tile", pd.concat(frames), {"config": {}})
    run = {"config": {"world_size": 8, "rank": 0}, "provenance": {"git_commit": "x"},
           "rows": [{"M": 16384, "kernel": "stagger", "ok": True, "fused_us_nolog": 560.0, "fa_us_nolog": 540.0,
                     "fused_us_log": 561.0, "fused_log_cost_us": 1.0}]}
    (tmp_path / "tile-log-run.json").write_text(json.dumps(run))
    assert S.main([str(tmp_path), "--records", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "tile-log-summary.json").read_text())
    row = doc["rows"][0]
    assert row["launches"] == 3 and row["run_residual_us"] == pytest.approx(20.0) and row["log_cost_us"] == 1.0
    assert row["drift.range_per_wave"] == pytest.approx(0.06) and row["launch_us_log"] == pytest.approx(501.0)
    assert row["records_residual_us"] is None
    with pytest.raises(Exception, match="already exists"):
        S.main([str(tmp_path)])
    with pytest.raises(Exception, match="has no"):
        S.main([str(tmp_path / "nothing")])


def test_mainloop_excess_is_later_waves_against_wave_zero():
    buf = synthetic(grid=4, waves=3, loop_us=100.0, drift_us=0.0)
    for k, extra in ((1, 30.0), (2, 10.0)):  # waves 1 and 2 run longer; the partial wave 3 as wave 0
        buf[:, k, T.FIELD["end_ns"]] += int(extra * 1e3)
    cols = T.decode(buf)
    ex = T.mainloop_excess(cols)
    assert ex["per_wave_us"] == pytest.approx(40.0 / 3) and ex["sum_us"] == pytest.approx(40.0)
    cols["split_word"][cols["slot"] == 1] = T.PARTNER_WORD  # split halves are left out
    assert T.mainloop_excess(cols)["sum_us"] == pytest.approx(10.0)


def test_finish_spread_is_the_last_cta_against_the_median():
    cols = T.decode(synthetic(grid=4, waves=3, loop_us=100.0, drift_us=2.0, partial=4))
    # every CTA runs 4 waves; CTA c ends at 300 + 6c + 100 us: median of 0, 6, 12, 18 is 9
    assert T.finish_spread(cols) == pytest.approx(18.0 - 9.0)


def test_verdict_rules():
    S = load_summary()
    fa = {"mainloop_excess.per_wave_us": -5.0, "mainloop_excess.sum_us": -10.0, "finish_spread_us": 4.0,
          "drift.range_per_wave": 0.02}
    fused = {"kernel": "stagger", "M": 32768, "mainloop_excess.per_wave_us": -4.0, "mainloop_excess.sum_us": -8.0,
             "finish_spread_us": 30.0, "drift.range_per_wave": 0.018, "records_residual_us": 12.0,
             "queue.link_done_after_end_us": 3.0, "last_wave.end_range_us": 80.0, "last_wave.end_iqr_us": 30.0,
             "last_wave.drain_us": 50.0, "last_wave.remote_sends": 80}
    sens = {"stagger": {"0.0": {"within": 9, "n": 12}, "0.007": {"within": 12, "n": 12}}}
    v = S.verdict(fa, fused, sens)
    assert v["explanation"] == "drift" and v["drift_needed_all_within"] == [0.007]
    assert v["finish_spread_growth_us"] == pytest.approx(26.0) and v["stretch_per_wave_us"] == pytest.approx(1.0)
    assert S.verdict(fa, dict(fused, **{"last_wave.end_range_us": 40.0}), sens)["explanation"] == "beyond replay"
    assert S.verdict(fa, dict(fused, records_residual_us=90.0), sens)["explanation"] == "beyond replay"
    assert S.verdict(fa, dict(fused, **{"last_wave.remote_sends": 0}), sens)["explanation"] == "order"
    assert S.verdict(fa, dict(fused, **{"mainloop_excess.per_wave_us": 6.0}), {})["explanation"] == "congestion"


def test_tile_records_round_trip_to_the_same_figures():
    pd = pytest.importorskip("pandas")
    from xstage.records import check_columns

    cols = T.decode(synthetic(grid=4, waves=3, blocks=64))
    cols["split_word"][cols["slot"] == 3] = T.PARTNER_WORD  # a partner's send is NaN in the records
    cols["send_ns"][cols["slot"] == 3] = 0
    rec = pd.DataFrame(T.record_columns(cols, M=64 * 128, kernel="drain", mode="fused", launch=0, launch_us=1.0,
                                        world=8, rank=0, platform="p"))
    check_columns("tile", rec)
    assert rec["mainloop_start(us)"].min() == 0.0 and rec["issue_start(us)"].isna().sum() == 2
    assert rec["bytes_remote"].sum() == int(T.remote(cols, 64, 8, 0).sum()) * T.TILE_BYTES
    back = T.stamp_columns(rec)
    a, b = (T.launch_summary(c, 64, 8, 0, 52.5) for c in (cols, back))
    assert b["drift"] == pytest.approx(a["drift"]) and b["last_wave"] == pytest.approx(a["last_wave"])
    assert b["queue"] == pytest.approx(a["queue"]) and b["mainloop_excess"] == pytest.approx(a["mainloop_excess"])
    fa = pd.DataFrame(T.record_columns(cols, M=64 * 128, kernel="drain", mode="fa", launch=0, launch_us=1.0,
                                       world=8, rank=0, platform="p"))
    assert fa["bytes_remote"].sum() == 0  # FA-only writes HBM


def test_launch_summary_does_not_depend_on_the_timer_origin():
    cols = T.decode(synthetic(grid=4, waves=3, blocks=64))
    late = dict(cols, **{f: np.where(cols[f] > 0, cols[f] + 1_700_000_000_000_000_000, 0)
                         for f in ("start_ns", "end_ns", "send_ns")})
    a, b = (T.launch_summary(c, 64, 8, 0, 52.5) for c in (cols, late))
    assert b["queue"] == pytest.approx(a["queue"], abs=1e-2) and b["drift"] == pytest.approx(a["drift"])
    assert all(x == pytest.approx(y) for x, y in zip(b["waves"], a["waves"]))
