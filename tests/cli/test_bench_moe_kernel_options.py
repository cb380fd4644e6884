"""``--short-k-kernel`` / ``--long-k-kernel`` files: checked before any GPU work; config_tiles applies them."""

import json

import pytest

from xstage.cli.bench_moe import kernel_options
from xstage.errors import InputError
from xstage.hw.moe import bench as B


@pytest.mark.parametrize("content", ['[1]', '{"prefetch": 1}', '{"warp": true}', '{"group_rows": 0}', 'not json'])
def test_bad_files_are_refused(tmp_path, content):
    f = tmp_path / "k.json"
    f.write_text(content)
    with pytest.raises(InputError):
        kernel_options(str(f))


def test_options_update_the_family_they_name(tmp_path):
    f = tmp_path / "k.json"
    f.write_text(json.dumps({"early_rows": False, "group_rows": 4}))
    opts = kernel_options(str(f))
    kw, kw8 = dict(B.BF16_FAST), dict(B.W8A8_FAST)
    _, pps, short = B.config_tiles("bf16", 1024, kw, kw8, False, short_k=opts)
    assert pps == 2 and short["early_rows"] is False and "group_rows" not in short and short["maxnreg"] == 128
    _, _, long_ = B.config_tiles("bf16", 4096, kw, kw8, False, short_k=opts)
    assert long_["early_rows"] is True                   # short-K options leave long K alone
    assert B.config_tiles("bf16", 4096, kw, kw8, False, long_k=opts)[2]["early_rows"] is False
    assert B.config_group_rows("bf16", 1024, 8, short_k=opts) == 4
    assert B.config_group_rows("bf16", 1024, 8) == B.BF16_SHORT_K["group_rows"] == 16   # the committed default
    assert B.config_group_rows("bf16", 4096, 8, short_k=opts) == 8
    assert B.config_group_rows("w8a8", 1024, 8, short_k=opts) == 8


def test_models_flag_names_sweep_models(tmp_path):
    import argparse

    from xstage.cli import bench_moe as C
    from xstage.errors import InputError

    ap = argparse.ArgumentParser()
    C.add_flags(ap)
    ok = C.check(ap.parse_args(["--out", str(tmp_path / "a"), "--models", "DiT-MoE-S,DiT-MoE-M"]))
    assert ok.models == "DiT-MoE-S,DiT-MoE-M"
    with pytest.raises(InputError):
        C.check(ap.parse_args(["--out", str(tmp_path / "b"), "--models", "DiT-MoE-X"]))


def test_flat_short_k_options_apply_only_where_hidden_equals_intermediate():
    from xstage.hw.moe import bench as B

    opts = {"flat": True, "num_stages": 2}
    _, _, dit = B.config_tiles("bf16", 1536, B.BF16_FAST, B.W8A8_FAST, False, short_k=opts, hidden=1536)
    _, _, other = B.config_tiles("bf16", 512, B.BF16_FAST, B.W8A8_FAST, False, short_k=opts, hidden=7168)
    assert dit["flat"] and dit["num_stages"] == 2
    assert "flat" not in other and other == B.BF16_SHORT_K["kernel"]


def test_heldout_sweep_is_new_configurations_and_scopes_models(tmp_path):
    import argparse

    from xstage.cli import bench_moe as C
    from xstage.errors import InputError
    from xstage.hw.moe.bench import HELDOUT, SWEEP

    key = lambda c: c[1:]  # noqa: E731 - everything but the model label
    assert HELDOUT and not {key(c) for c in HELDOUT} & {key(c) for c in SWEEP}
    assert {c[5] for c in HELDOUT} == {"bf16", "w8a8"}
    ap = argparse.ArgumentParser()
    C.add_flags(ap)
    ok = C.check(ap.parse_args(["--out", str(tmp_path / "a"), "--sweep", "heldout", "--models", "DiT-MoE-L"]))
    assert ok.sweep == "heldout"
    with pytest.raises(InputError):   # a main-sweep model is not in the held-out sweep
        C.check(ap.parse_args(["--out", str(tmp_path / "b"), "--sweep", "heldout", "--models", "DiT-MoE-S"]))
    assert ap.parse_args(["--out", str(tmp_path / "c")]).sweep == "main"


def test_balance_is_a_schedule_option_not_a_kernel_option(tmp_path):
    from xstage.cli.bench_moe import kernel_options
    from xstage.hw.moe import bench as B

    f = tmp_path / "short.json"
    f.write_text('{"gluon": true, "balance": true}')
    short = kernel_options(str(f))
    _, _, kw = B.config_tiles("bf16", 1536, dict(B.BF16_FAST), dict(B.W8A8_FAST), False, short, None, hidden=1536)
    assert kw["gluon"] is True and "balance" not in kw
    assert B.config_balance("bf16", 1536, short, None) is True
    assert B.config_balance("bf16", 2048, short, None) is False      # long K takes --long-k-kernel's options
    assert B.config_balance("w8a8", 1536, short, None) is False
    f.write_text('{"balance": 1}')
    with pytest.raises(InputError):
        kernel_options(str(f))
