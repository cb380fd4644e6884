"""``xstage replay fa``: the catalog replay unchanged without predictor flags; the predictor with any of them."""

import json

import pytest


CATALOG_KEYS = {"shape", "M", "heads", "tiles", "burst_waves", "kv_step_us", "G_Qloop_us", "cover_us", "fa_us",
                "fused_us", "coupled_us", "serial_us", "E_res_us", "E_cc_us", "hiding_ratio", "speedup_vs_serial",
                "V_MiB", "T_iss0_us", "G_star_us", "M_ub_star", "model_dt_us", "model_E_drain_us", "model_E_cc_us",
                "fused_peak_queue_MiB"}
HOST = ["replay", "fa", "-M", "16384", "--heads", "3", "-p", "h200-pcie-host"]


def test_without_predictor_flags_the_output_is_the_catalog_replay(cli):
    code, out, _ = cli("replay", "fa", "-M", "8192", "--json")
    assert code == 0 and set(json.loads(out)) == CATALOG_KEYS


def test_fa_us_drives_the_predictor(cli):
    code, out, _ = cli(*HOST, "--fa-us", "553.3", "--json")
    d = json.loads(out)
    assert code == 0
    assert d["fa_us"] == pytest.approx(553.3) and d["fa_us_source"] == "measured"
    assert d["qloop_us"] == pytest.approx(553.3 / 3)
    assert d["remote_MiB"] == pytest.approx(3 * 16384 * 128 * 2 * 7 / 8 / 2**20)   # Ulysses: own chunk local
    assert d["fused_us"] == pytest.approx(d["fa_us"] + d["E_res_us"])
    assert d["hiding_ratio"] == pytest.approx(1 - d["E_res_us"] / d["a2a_us"])
    assert d["exit_waits_for_drain"] is False


def test_flags_reach_the_kernel(cli):
    code, out, _ = cli(*HOST, "--world-size", "4", "--rank", "3", "--remote-fraction", "0.5",
                       "--head-dim", "64", "--block-m", "64", "--block-n", "64", "--send", "stagger", "--json")
    d = json.loads(out)
    assert code == 0 and d["fa_us_source"] == "platform tensor rate"
    assert (d["world_size"], d["head_dim"], d["block_m"], d["block_n"], d["send"]) == (4, 64, 64, 64, "stagger")
    assert d["tiles"] == 3 * 16384 // 64
    assert d["remote_MiB"] == pytest.approx(3 * 16384 * 64 * 2 * 0.5 / 2**20)


def test_sm_stage_option(cli):
    _, plain, _ = cli(*HOST, "--fa-us", "553.3", "--json")
    code, out, _ = cli(*HOST, "--fa-us", "553.3", "--exit-waits-for-drain", "--json")
    d, p = json.loads(out), json.loads(plain)
    assert code == 0 and d["exit_waits_for_drain"] is True
    assert (d["sm_store_GBps"], d["shared_buffer_MiB"]) == (1.065, 0.78)
    assert d["E_res_us"] > p["E_res_us"]
    code, out, _ = cli(*HOST, "--fa-us", "553.3", "--exit-waits-for-drain", "--sm-store-GBps", "2.5",
                       "--shared-buffer-MiB", "0.5", "--json")
    d = json.loads(out)
    assert code == 0 and (d["sm_store_GBps"], d["shared_buffer_MiB"]) == (2.5, 0.5)


def test_table_output(cli):
    code, out, _ = cli(*HOST, "--fa-us", "553.3")
    assert code == 0
    assert {line.split()[0] for line in out.splitlines()} >= {"fa_us", "fused_us", "E_res_us", "hiding_ratio"}


@pytest.mark.parametrize("extra,needle", [
    (["--fa-us", "-1"], "--fa-us(='-1')"),
    (["--fa-us", "nan"], "--fa-us(='nan')"),
    (["--head-dim", "0"], "--head-dim(='0')"),
    (["--block-m", "x"], "--block-m(='x')"),
    (["--block-m", "96"], "--seq-len(=16384)"),
    (["--block-n", "-4"], "--block-n(='-4')"),
    (["--world-size", "3"], "--seq-len(=16384)"),
    (["--world-size", "0"], "--world-size(='0')"),
    (["--rank", "8"], "--rank(='8')"),
    (["--rank", "-1"], "--rank(='-1')"),
    (["--remote-fraction", "1.5"], "--remote-fraction(='1.5')"),
    (["--remote-fraction", "-0.1"], "--remote-fraction(='-0.1')"),
    (["--send", "drip"], "--send(='drip')"),
    (["--sm-store-GBps", "2"], "--sm-store-GBps(='2')"),
    (["--exit-waits-for-drain", "--shared-buffer-MiB", "0"], "--shared-buffer-MiB(='0')"),
    (["--fa-us", "100", "--shape", "fa9"], "--shape(='fa9')"),
    (["--order", "zigzag"], "--order(='zigzag')"),
    (["--tail-parts", "0"], "--tail-parts(='0')"),
    (["--fa-tail-parts", "x"], "--fa-tail-parts(='x')"),
    (["--tail-parts", "1000"], "--tail-parts(=1000)"),
    (["--program-spread", "1"], "--program-spread(='1')"),
    (["--fa-program-spread", "-0.5"], "--fa-program-spread(='-0.5')"),
    (["--mainloop-factor", "0"], "--mainloop-factor(='0')"),
    (["--sm-pool-GBps", "nan"], "--sm-pool-GBps(='nan')"),
    (["--send", "stagger", "--send-step-offset", "x"], "--send-step-offset(='x')"),
    (["--send-step-offset", "1"], "--send-step-offset(=1)"),
    (["--hold", "later"], "--hold(='later')"),
    (["--hold", "next_epilogue", "--tail-parts", "2"], "--hold(='next_epilogue')"),
])
def test_bad_values_one_line_exit_2(cli, extra, needle):
    code, out, err = cli(*HOST, *extra)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err


def test_kernel_structure_flags_reach_the_kernel(cli):
    # the Triton kernel at 8K: own chunk last, FA-only split tail; its Q-loop is fa_us over 1.5 Q-loops
    code, out, _ = cli("replay", "fa", "-M", "8192", "--heads", "3", "-p", "h200-pcie-host", "--fa-us", "206",
                       "--order", "local_last", "--fa-tail-parts", "2", "--mainloop-factor", "1.03",
                       "--program-spread", "0.01", "--fa-program-spread", "0.02", "--sm-pool-GBps", "60", "--json")
    d = json.loads(out)
    assert code == 0
    assert (d["order"], d["tail_parts"], d["fa_tail_parts"]) == ("local_last", 1, 2)
    assert (d["mainloop_factor"], d["program_spread"], d["fa_program_spread"], d["sm_pool_GBps"]) == (1.03, 0.01, 0.02, 60.0)
    assert d["fa_us"] == pytest.approx(206.0)
    assert 206.0 / 1.5 / 1.02 < d["qloop_us"] <= 206.0 / 1.5 + 1e-9


def test_send_step_offset_reaches_the_kernel(cli):
    code, out, _ = cli(*HOST, "--fa-us", "565.8", "--send", "stagger", "--send-step-offset", "1", "--json")
    d = json.loads(out)
    assert code == 0 and (d["send"], d["send_step_offset"]) == ("stagger", 1)
    code, out, _ = cli(*HOST, "--fa-us", "565.8", "--send", "stagger", "--json")
    assert code == 0 and "send_step_offset" not in json.loads(out)


def test_hold_reaches_the_kernel(cli):
    law = ("--exit-waits-for-drain", "--sm-store-GBps", "52.8", "--shared-buffer-MiB", "0.01")
    code, out, _ = cli(*HOST, "--fa-us", "565.8", *law, "--hold", "next_epilogue", "--json")
    d = json.loads(out)
    code0, out0, _ = cli(*HOST, "--fa-us", "565.8", *law, "--json")
    d0 = json.loads(out0)
    assert (code, code0) == (0, 0) and d["hold"] == "next_epilogue" and "hold" not in d0
    assert d["E_res_us"] < d0["E_res_us"]
