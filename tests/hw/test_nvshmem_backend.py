"""The nvshmem backend of the peer paths: refusal without nvshmem4py, the --backend selector, and the
unique-ID / allocation plumbing on a fake ``nvshmem`` package (no GPU). The self-PE smoke on a GPU with
nvshmem4py is marked ``gpu``; benchmarks/gpu/nvshmem_smoke.sh runs it with the calibration."""

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from xstage.cli import main
from xstage.errors import InputError
from xstage.hw.common import nvshmem as nvs
from xstage.hw.common import targets

QUICK = ["calibrate", "--target", "peer", "--self-peer", "--quick", "--no-copy"]


@pytest.fixture
def no_nvshmem(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvshmem", None)       # import nvshmem.core -> ImportError
    monkeypatch.setitem(sys.modules, "nvshmem.core", None)


def test_backend_refuses_with_one_line_without_nvshmem4py(no_nvshmem, tmp_path, capsys):
    with pytest.raises(InputError, match="nvshmem4py-cu13"):
        nvs.core()
    assert main([*QUICK, "--backend", "nvshmem", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install nvshmem4py-cu13" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "platform.json").exists()


@pytest.mark.parametrize("argv, must", [(["--backend", "mpi"], "must be one of torch, nvshmem"),
                                        (["--backend", "nvshmem", "--target", "host"], "needs --target peer")])
def test_backend_flag_is_checked(tmp_path, capsys, argv, must):
    assert main([*QUICK, *argv, "--out", str(tmp_path / "o")]) == 2
    assert must in capsys.readouterr().err


def test_selector_default_is_torch_and_unchanged(monkeypatch):
    from xstage.cli import build_parser
    args = build_parser().parse_args(["calibrate", "--target", "peer", "--out", "x"])
    assert args.backend == "torch"
    calls = []
    monkeypatch.setattr(targets, "check_target", lambda *a, **k: None)
    monkeypatch.setattr(targets, "peer_buffer", lambda *a, **k: calls.append((a, k)) or "torch-buffer")
    assert targets.open_target("peer", 4096, self_peer=True) == "torch-buffer"
    assert calls == [((4096, "next"), {})]          # the torch path is called exactly as before
    assert targets.open_target("peer", 4096, self_peer=True, backend="torch") == "torch-buffer"


class _Uid:
    def __init__(self, data):
        self._data = np.array(data, dtype=np.int8)


def _fake_core(made):
    core = types.SimpleNamespace()
    core.get_unique_id = lambda empty=False: _Uid([0] * 8 if empty else list(range(1, 9)))
    core.init = lambda **kw: made.append(kw)
    return core


def test_bootstrap_rank0_creates_the_uid_and_every_rank_gets_it():
    made, sent = [], []
    nvs.bootstrap(_fake_core(made), 0, 1, share=lambda p: pytest.fail("no broadcast at W = 1"))
    assert made[-1]["rank"] == 0 and made[-1]["nranks"] == 1 and made[-1]["initializer_method"] == "uid"
    root = bytes(range(1, 9))
    nvs.bootstrap(_fake_core(made), 0, 2, share=lambda p: sent.append(p) or p)
    nvs.bootstrap(_fake_core(made), 1, 2, share=lambda p: sent.append(p) or root)
    assert sent == [root, None]                       # rank 0 sends its uid, rank 1 receives it
    assert bytes(made[-1]["uid"]._data.view(np.uint8)) == root and made[-1]["rank"] == 1
    assert made[-1]["nranks"] == 2


def test_peer_table_refuses_an_unreachable_pe():
    assert nvs.peer_table(0x1000, 3, ptr=lambda base, pe: base + pe * 0x100) == [0x1000, 0x1100, 0x1200]
    with pytest.raises(InputError, match="PE 1 is not reachable by load/store"):
        nvs.peer_table(0x1000, 2, ptr=lambda base, pe: None if pe else base)


def test_symmetric_buffer_has_the_shape_of_the_torch_result(monkeypatch):
    torch = pytest.importorskip("torch")
    pkg, core, bindings = types.ModuleType("nvshmem"), types.ModuleType("nvshmem.core"), types.ModuleType("nvshmem.bindings")
    core.tensor = lambda shape, dtype: torch.zeros(shape, dtype=dtype)
    core.get_peer_tensor = lambda t, pe: t if pe == 0 else torch.full_like(t, 7)
    freed = []
    core.free_tensor = freed.append
    bindings.ptr = lambda base, pe: base + pe * 2**20
    pkg.core, pkg.bindings = core, bindings
    for name, mod in (("nvshmem", pkg), ("nvshmem.core", core), ("nvshmem.bindings", bindings)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(nvs, "init", lambda: (0, 2))
    buf, handle, table = nvs.symmetric_buffer((4, 8), torch.bfloat16, device="cpu")
    assert buf.shape == (4, 8) and buf.dtype == torch.bfloat16
    base = int(buf.data_ptr())
    assert table.dtype == torch.int64 and table.tolist() == [base, base + 2**20] == handle.buffer_ptrs
    assert handle.get_buffer(1, (2, 8), torch.bfloat16).shape == (2, 8)
    assert float(handle.get_buffer(1, (2, 8), torch.bfloat16)[0, 0]) == 7.0
    handle.close()
    assert freed == [buf] and handle.tensor is None


@pytest.mark.gpu
def test_self_pe_smoke_on_gpu(nvshmem_gpu):
    """Self-PE init, a symmetric buffer written by a kernel through its nvshmem_ptr, every word checked."""
    code = ("import json; from xstage.hw.common import nvshmem as n; r = n.self_check(1 << 20); n.finalize(); "
            "print(json.dumps(r))")
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["npes"] == 1 and out["mismatches"] == 0 and out["words"] == 1 << 20
    assert out["table"] == [out["local_ptr"]]


@pytest.mark.parametrize("module, argv", [
    ("xstage.cli.bench_moe_dist", ["--backend", "nvshmem"]),
    ("xstage.cli.bench_attention_dist", ["--backend", "nvshmem"]),
])
def test_w_rank_benches_take_the_backend_and_refuse_without_nvshmem4py(no_nvshmem, tmp_path, capsys, module, argv):
    import importlib
    bench = importlib.import_module(module)
    assert bench.main(["--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install nvshmem4py-cu13" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_w_rank_benches_default_to_torch_and_check_the_flag(tmp_path, capsys):
    from xstage.cli import bench_attention_dist, bench_moe_dist
    assert bench_moe_dist.parse_args(["--out", str(tmp_path / "m")]).backend == "torch"
    assert bench_attention_dist.parse_args(["--out", str(tmp_path / "a")], world=1)[0].backend == "torch"
    assert bench_attention_dist.main(["--dry-run", "--backend", "nvshmem"]) == 2
    assert "--backend(='nvshmem') needs the GPU" in capsys.readouterr().err
    assert bench_moe_dist.main(["--out", str(tmp_path / "m"), "--backend", "mpi"]) == 2
    assert "invalid choice: 'mpi'" in capsys.readouterr().err
