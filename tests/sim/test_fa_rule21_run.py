"""Rule 21's device call without a device: the instrument's settings from the plan (``benchmarks/gpu/fa_rule20.py``:
arms, ``hbm`` rounds, warm pairs, the seeded pair order), a synthetic run with made-up launch times written by the
device script's own round loop and writer and scored by ``benchmarks/fa_rule21.py score`` (E, T, the instrument's
splits, the ``hbm`` control's F), the scorer's one-line errors, the device script end to end under the Triton
interpreter, and the thin shell scripts of rules 19, 20 and 21 over ``common.sh``."""

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.hw.common import timing
from xstage.paths import data_dir
from xstage.records import load_records

from ..fake_cuda import FakeEvent
from .bench_scripts import BENCHMARKS, load_script

REPO = BENCHMARKS.parent
PLAN21 = "attention-extra/fa-rule21-plan.json"


@pytest.fixture(scope="module")
def R():
    return load_script("fa_rule21")


@pytest.fixture(scope="module")
def G():
    return load_script("fa_rule20", "gpu", "fa_rule20_gpu")


# ---------------------------------------------------------------- the plan's settings


def test_a_plan_without_the_new_fields_runs_rule_20s_instrument(G):
    plan = json.loads((data_dir() / "attention-extra/fa-rule20-plan.json").read_text())
    s = G.plan_settings(plan)
    assert (s["arms"], s["rounds"], s["hbm_rounds"], s["warm_pairs"], s["warm"], s["order"]) == \
        (["keep", "recapture", "fresh"], 8, 8, 1, "direct", "alternate")
    assert G.round_arms(s) == [["keep", "recapture", "fresh"]] * 8
    assert G.pair_order(s["order"], 123, 48) is None          # paired_differences' own alternation


def test_rule_21s_plan_runs_keep_every_round_and_hbm_every_other(G):
    s = G.plan_settings(json.loads((data_dir() / PLAN21).read_text()))
    assert (s["arms"], s["rounds"], s["hbm_rounds"], s["warm_pairs"], s["warm"], s["order"]) == \
        (["keep", "hbm"], 16, 8, 8, "in_stream", "random")
    arms = G.round_arms(s)
    assert [r for r, a in enumerate(arms) if "hbm" in a] == [0, 2, 4, 6, 8, 10, 12, 14]
    assert all("keep" in a for a in arms)
    assert G.round_arms({**s, "rounds": 5, "hbm_rounds": 2}) == [["keep", "hbm"], ["keep"], ["keep", "hbm"],
                                                                 ["keep"], ["keep"]]


@pytest.mark.parametrize("change, field", [({"arms": ["keep", "hbx"]}, "arms"), ({"arms": ["keep", "keep"]}, "arms"),
                                           ({"order": "shuffled"}, "order"), ({"hbm_rounds": 17}, "hbm_rounds"),
                                           ({"warm_pairs": -1}, "warm_pairs"), ({"warm": "before"}, "warm"),
                                           ({"points": []}, "points"),
                                           ({"rounds": 0}, "rounds")])
def test_bad_plan_settings_are_refused_by_name(G, change, field):
    plan = {**json.loads((data_dir() / PLAN21).read_text()), **change}
    with pytest.raises(InputError, match=rf"^{field}\(="):
        G.plan_settings(plan)


def test_the_pair_order_is_balanced_seeded_per_block_and_reproducible(G):
    seeds = {G.block_seed(211, arm, r) for arm in G.ALL_ARMS for r in range(16)}
    assert len(seeds) == 4 * 16 and G.block_seed(211, "hbm", 3) == 2110033
    a = G.pair_order("random", G.block_seed(211, "keep", 0), 48)
    assert len(a) == 48 and sum(a) == 24 and all(type(x) is bool for x in a)
    assert a == G.pair_order("random", G.block_seed(211, "keep", 0), 48)
    assert a != G.pair_order("random", G.block_seed(211, "keep", 1), 48)
    assert a != [i % 2 == 0 for i in range(48)]
    assert sum(G.pair_order("random", 7, 5)) == 3


# ---------------------------------------------------------------- a synthetic run through the device script's path



class FakeDests:
    buffers = []

    def poison(self):
        pass


def fake_point(G, M, heads, head_dim, block_n, seed, T_us, E_us, O_us, keep_step_us=0.0, hbm_block_sd_us=0.0):
    """A ``Point`` whose launches advance the fake clock by made-up times (us): FA-only T, the fused build T + E,
    split_hbm T + O, the k-th launch of each build in a block with the same noise in every block (SD 3 us), so that
    blocks differ only by what is added: ``keep`` blocks from the fifth on E + keep_step_us, every ``hbm`` block its
    own offset of SD hbm_block_sd_us."""
    rng = np.random.default_rng(seed)
    noise = {name: rng.normal(0.0, 3.0, 200) for name in ("fa", "fused", "hbm")}
    state = {"keep": 0, "hbm": 0, "keep_off": 0.0, "hbm_off": 0.0}
    calls = {}

    def launch(name, extra):
        def fn():
            k = calls[name] = calls.get(name, -1) + 1
            FakeEvent.clock_ms += (T_us + extra() + noise[name][k]) / 1e3
        return fn

    class FakePoint(G.Point):
        def __init__(self):
            self.cfg = types.SimpleNamespace(seq_len=M, heads=heads, head_dim=head_dim, block_n=block_n)
            self.seed = seed
            fa, fused = launch("fa", lambda: 0.0), launch("fused", lambda: E_us + state["keep_off"])
            hbm = launch("hbm", lambda: O_us + state["hbm_off"])
            self.b = {"fns": {"fa": fa, "fused_wb_split": fused, "split_hbm": hbm}, "dests": FakeDests()}
            self.graphs = {"keep": (fa, fused), "hbm": (fa, hbm)}

        def block(self, arm, n_pairs, warm_pairs=1, order=None, warm="direct"):
            state[arm] += 1
            state["keep_off"] = keep_step_us if arm == "keep" and state["keep"] > 4 else 0.0
            state["hbm_off"] = rng.normal(0.0, hbm_block_sd_us) if arm == "hbm" else 0.0
            calls.clear()
            return super().block(arm, n_pairs, warm_pairs, order, warm)

    return FakePoint()


@pytest.fixture
def synthetic_run(G, R, monkeypatch, tmp_path):
    """A run of two points x 8 rounds (keep every round, hbm in 4), 24 pairs per block, 2 warm pairs in the stream,
    random order,
    made by ``fa_rule20.sweep`` and ``write_run`` on the fake clock; and its plan (the first point fresh)."""
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        cuda=types.SimpleNamespace(Event=FakeEvent, _sleep=lambda n: None)))
    monkeypatch.setattr(timing, "device", lambda: "cuda")
    monkeypatch.setattr(timing, "sync", lambda: None)
    clock = iter(float(x) for x in range(1_000_000))
    monkeypatch.setattr(timing.time, "time", lambda: next(clock))     # host marks in order, one second apart
    monkeypatch.setattr(G, "probe", lambda b, dests: [11.0, 12.0, 12.5, 13.0])
    rule = R.frozen(data_dir())
    T_a = 6000.0
    E_a = R.rule21({"M": 27648, "heads": 8, "head_dim": 64, "block_n": 64, "T": T_a}, rule)
    points = [fake_point(G, 27648, 8, 64, 64, 217, T_a, E_a, -8.0),
              fake_point(G, 45056, 4, 128, 128, 3, 9000.0, 400.0, 5.0, keep_step_us=150.0, hbm_block_sd_us=40.0)]
    plan = {"rounds": 8, "arms": ["keep", "hbm"], "hbm_rounds": 4, "warm_pairs": 2, "warm": "in_stream",
            "order": "random", "points": [{"M": 27648, "heads": 8, "head_dim": 64, "block_n": 64, "pairs_per_block": 24, "seed": 217,
                        "status": "fresh"},
                       {"M": 45056, "heads": 4, "head_dim": 128, "block_n": 128, "pairs_per_block": 24, "seed": 3,
                        "status": "committed control"}]}
    settings = G.plan_settings(plan)
    out = tmp_path / "run"
    out.mkdir()
    meta = {"args": {"plan": "synthetic"}, "plan": plan, "provenance": {"git_commit": "synthetic"},
            "settings": settings, "checks": [{"variant": "fa", "ok": True}], "rounds_done": 0}
    pair_rows, block_rows = [], []
    G.sweep(points, [24, 24], settings, 1e9, meta, pair_rows, block_rows,
            save=lambda: G.write_run(out, pair_rows, block_rows, meta), log=lambda line: None)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return out, tmp_path / "plan.json", E_a


def test_the_synthetic_run_has_what_the_plan_asked(G, synthetic_run):
    out, _, _ = synthetic_run
    pairs, _ = load_records(out / "rule20-pairs.parquet")
    blocks, _ = load_records(out / "rule20-blocks.parquet")
    meta = json.loads((out / "rule20-meta.json").read_text())
    assert meta["rounds_done"] == 8
    assert blocks.groupby("arm").size().to_dict() == {"hbm": 8, "keep": 16}
    assert sorted(blocks[blocks["arm"] == "hbm"]["round"].unique()) == [0, 2, 4, 6]
    assert (blocks["pairs"] == 24).all() and (blocks["warm_pairs"] == 2).all() and (blocks["warm"] == "in_stream").all()
    hbm = blocks[blocks["arm"] == "hbm"]
    assert hbm["probe_median(us)"].isna().all() and (hbm["pages"] == 0).all()     # no probe in the control arm
    assert (blocks[blocks["arm"] == "keep"]["probe_median(us)"] == 12.25).all()
    assert set(pairs.groupby("arm")["variant"].unique().map(tuple)) == {("fused_wb_split",), ("split_hbm",)}
    # every block's pairs went in the order its recorded seed gives
    for b in blocks.to_dict(orient="records"):
        got = pairs[(pairs["M"] == b["M"]) & (pairs["arm"] == b["arm"]) & (pairs["round"] == b["round"])]
        assert b["order_seed"] == G.block_seed(217 if b["M"] == 27648 else 3, b["arm"], b["round"])
        assert got.sort_values("pair")["base_first"].tolist() == G.pair_order("random", b["order_seed"], 24)


def test_score_reads_the_synthetic_run(R, synthetic_run):
    out, plan, E_a = synthetic_run
    rec = R.score(data_dir(), str(out), str(plan))
    a, b = rec["points"]
    assert a["point"] == "27648:8 d64 bn64" and a["fresh"] and not b["fresh"]
    assert a["T"] == pytest.approx(6000.0, abs=3) and a["E"] == pytest.approx(E_a, abs=3) and a["blocks"] == 8
    assert a["within"] and rec["within"] == 1 and rec["n"] == 1 and rec["met"]
    # the instrument: the second point's E steps by 150 us half way, so its two halves disagree
    assert a["self_agree"] and not b["self_agree"] and not b["agree"]["early_late"]
    assert rec["self_agree"] == 1 and rec["points_planned"] == 2 and not rec["instrument_ok"]
    # the control: 4 hbm blocks per point, O near its made-up value; a block effect only at the second point
    assert a["control"]["blocks"] == 4 and a["control"]["O_us"] == pytest.approx(-8.0, abs=3)
    assert a["control"]["F"] == pytest.approx(0.0, abs=1e-9) and b["control"]["F"] > 50     # no block effect: F 0
    assert rec["control_under"] == 1 and not rec["control_ok"]
    assert rec["settings"]["order"] == "random" and rec["checks"] == {"rows": 1, "ok": 1}


def test_score_cli_writes_the_record(synthetic_run, tmp_path):
    out, plan, _ = synthetic_run
    res = subprocess.run([sys.executable, str(BENCHMARKS / "fa_rule21.py"), "score", "--run", str(out), "--plan",
                          str(plan), "--out", str(tmp_path / "scored.json")], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    rec = json.loads((tmp_path / "scored.json").read_text())
    assert (rec["within"], rec["n"], rec["control_under"], rec["self_agree"]) == (1, 1, 1, 1)


@pytest.mark.parametrize("args, line", [
    (["--run", "attention-runs/no-such-run"], "fa_rule21.py: error: --run(='attention-runs/no-such-run') has no "
                                             "rule20-pairs.parquet"),
    (["--run", "attention-runs/71a2b52-rule20", "--plan", "PLAN"], "fa_rule21.py: error: --plan(='PLAN') has no "
                                                                    "points"),
    (["--run", "attention-runs/71a2b52-rule20", "--plan", "attention-extra/nothing.json"],
     "fa_rule21.py: error: --plan(='attention-extra/nothing.json') is not a file"),
    ([], "fa_rule21.py: error: --run(=None) is needed with score"),
])
def test_score_cli_bad_input_is_one_line_and_status_2(tmp_path, args, line):
    empty = tmp_path / "plan.json"
    empty.write_text(json.dumps({"rounds": 16, "points": []}))
    args = [str(empty) if a == "PLAN" else a for a in args]
    res = subprocess.run([sys.executable, str(BENCHMARKS / "fa_rule21.py"), "score", *args], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1
    assert res.stderr.startswith(line.replace("PLAN", str(empty)))


# ---------------------------------------------------------------- the device script under the Triton interpreter


def test_device_script_dry_run_with_the_hbm_arm(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    plan = {"rounds": 2, "arms": ["keep", "hbm"], "hbm_rounds": 1, "warm_pairs": 1, "order": "random",
            "points": [{"M": 1024, "heads": 1, "head_dim": 64, "block_n": 64, "pairs_per_block": 4, "seed": 5}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    res = subprocess.run([sys.executable, str(BENCHMARKS / "gpu" / "fa_rule20.py"), "--plan",
                          str(tmp_path / "plan.json"), "--out", str(tmp_path / "out")], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"}, cwd=REPO)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    meta = json.loads((tmp_path / "out" / "rule20-meta.json").read_text())
    # the project's check of every build at setup and after the rounds: fresh inputs, float32 reference, poisoned
    # destinations, every element written
    assert [(c["variant"], c["when"], c["ok"]) for c in meta["checks"]] == \
        [(v, w, True) for w in ("setup", "after the rounds") for v in ("fa", "fused_wb_split", "split_hbm")]
    assert meta["round_arms"] == [["keep", "hbm"], ["keep"]] and meta["settings"]["order"] == "random"
    blocks, _ = load_records(tmp_path / "out" / "rule20-blocks.parquet")
    assert blocks[["arm", "round"]].values.tolist() == [["keep", 0], ["hbm", 0], ["keep", 1]]
    assert blocks["order_seed"].tolist() == [50000, 50003, 50010]
    assert blocks.loc[blocks["arm"] == "hbm", "buffer_ptr"].isna().all()


# ---------------------------------------------------------------- the thin shell scripts


FAKE_NVIDIA_SMI = """#!/usr/bin/env bash
case "$*" in *-lms*) echo "timestamp, sm"; exec sleep 30;; esac
echo "fake nvidia-smi $*"
"""
FAKE_PYTHON = """#!/usr/bin/env bash
echo "python3 $*"
"""
FAKE_TIMEOUT = """#!/usr/bin/env bash
echo "timeout $1"
shift
exec "$@"
"""


@pytest.mark.parametrize("script, py, budget, sweep, plan", [
    ("fa_rule19.sh", "fa_rule19.py", 270, 330, "data/attention-extra/fa-rule19-preregistered-h200-pcie-host.json"),
    ("fa_rule20.sh", "fa_rule20.py", 110, 230, "data/attention-extra/fa-rule20-plan.json"),
    ("fa_rule21.sh", "fa_rule20.py", 420, 560, "data/attention-extra/fa-rule21-plan.json"),
])
def test_the_shell_scripts_run_their_sweep_beside_the_trace(tmp_path, script, py, budget, sweep, plan):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, text in (("nvidia-smi", FAKE_NVIDIA_SMI), ("python3", FAKE_PYTHON), ("timeout", FAKE_TIMEOUT)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("BUDGET_S", "SWEEP_S", "PLAN")}
    for extra, b, t in (({}, budget, sweep), ({"BUDGET_S": "7", "SWEEP_S": "9"}, 7, 9)):
        out = tmp_path / f"out{b}"
        out.mkdir()
        res = subprocess.run(["bash", f"benchmarks/gpu/{script}"], capture_output=True, text=True, timeout=60,
                             cwd=REPO, env={**env, **extra, "OUT": str(out), "PATH": f"{bin_}:{os.environ['PATH']}"})
        assert res.returncode == 0, res.stderr
        log = (out / "log.txt").read_text()
        assert log == f"timeout {t}\npython3 benchmarks/gpu/{py} --out {out} --budget-s {b} --plan {plan}\n"
        assert f"{py[:-3]} rc 0 at " in res.stdout and "end " in res.stdout
        assert {p.name for p in out.iterdir()} == {"log.txt", "clocks-start.txt", "clocks-end.txt", "smi-trace.csv"}
        assert "fake nvidia-smi" in (out / "clocks-end.txt").read_text()
