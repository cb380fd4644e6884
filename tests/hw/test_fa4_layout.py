"""The receive layout as strided views (hw/attention/fa4_layout.py) and FA4's out= conditions, on CPU."""

import pytest

torch = pytest.importorskip("torch", reason="needs torch (the FA4 layout is tested on CPU torch tensors)")

from xstage.errors import InputError
from xstage.hw.attention import fa4_layout as L


def lay(M=2048, H=3, D=128, W=8, r=3):
    return L.ReceiveLayout(M, H, D, W, r)


@pytest.mark.parametrize("kw,field", [({"seq_len": 1000}, "seq_len"), ({"rank": 8}, "rank"),
                                      ({"head_dim": 100}, "head_dim"), ({"heads": 0}, "heads")])
def test_layout_rejects_bad_shapes_naming_the_field(kw, field):
    args = {"seq_len": 2048, "heads": 3, "head_dim": 128, "world_size": 8, "rank": 0, **kw}
    with pytest.raises(InputError) as err:
        L.ReceiveLayout(**args)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_byte_counts():
    la = lay()
    assert la.chunk_rows == 256 and la.row_bytes == 8 * 3 * 128 * 2
    assert la.total_bytes == 2048 * 3 * 128 * 2 * 8 and la.remote_bytes == 7 * 256 * 3 * 128 * 2
    assert la.tiles() == 16 * 3


def test_my_heads_is_the_a2a_destination_and_passes_fa4_checks():
    la = lay()
    buf = L.receive_view(torch.full((la.total_bytes // 2,), float("nan"), dtype=torch.bfloat16), la)
    out = L.my_heads(buf, la)
    assert out.shape == (1, 2048, 3, 128) and out.stride() == (out.stride(0), 8 * 3 * 128, 128, 1)
    q = torch.randn(1, 2048, 3, 128).to(torch.bfloat16)
    L.check_out_layout(out, q, q)
    o = torch.randn(2048, 3, 128).to(torch.bfloat16)
    out[0].copy_(o)
    for j in range(8):  # D_j[s - j*M/W, r*H + h] = O_r[s, h]
        dj = L.chunk(buf, la, j)
        assert torch.equal(dj[:, 9:12], o[j * 256:(j + 1) * 256])
        assert torch.isnan(dj[:, :9]).all() and torch.isnan(dj[:, 12:]).all()


def test_chunk_major_views_land_in_the_same_places():
    la = lay(r=5)
    buf = L.receive_view(torch.zeros(la.total_bytes // 2, dtype=torch.bfloat16), la)
    o = torch.randn(2048, 3, 128).to(torch.bfloat16)
    L.chunk_major_out(buf, la).copy_(o.view(8, 256, 3, 128))
    assert torch.equal(L.my_heads(buf, la)[0], o)
    q = torch.randn(1, 2048, 3, 128)
    assert torch.equal(L.chunk_major_q(q, la)[2], q[0, 512:768])
    kb = L.chunk_major_kv(q, la)
    assert kb.shape == (8, 2048, 3, 128) and kb.stride(0) == 0


def test_check_out_layout_names_each_violation():
    q = torch.randn(1, 256, 3, 128).to(torch.bfloat16)
    good = torch.empty(1, 256, 3, 128, dtype=torch.bfloat16)
    L.check_out_layout(good, q, q)
    wide = torch.empty(1, 256, 3, 136, dtype=torch.bfloat16)
    cases = [(torch.empty(1, 256, 2, 128, dtype=torch.bfloat16), "out shape"),
             (good.float(), "out dtype"),
             (good[:, :, :1].expand(1, 256, 3, 128), "out strides"),
             (torch.empty(1, 256, 3, 256, dtype=torch.bfloat16)[..., ::2], "out strides"),
             (torch.empty(1, 256, 3, 132, dtype=torch.bfloat16)[..., :128], "out strides"),
             (wide[..., 1:129], "out data_ptr")]
    for out, field in cases:
        with pytest.raises(InputError) as err:
            L.check_out_layout(out, q, q)
        assert str(err.value).startswith(field), (field, str(err.value))


def test_check_destinations_finds_unwritten_and_stray_elements():
    la = lay(M=1024, r=2)
    want = torch.randn(1024, 3, 128).to(torch.bfloat16)

    def written():
        buf = L.receive_view(torch.full((la.total_bytes // 2,), float("nan"), dtype=torch.bfloat16), la)
        L.my_heads(buf, la)[0].copy_(want)
        return buf

    assert L.check_destinations([(written(), 0, want)], la)["ok"]
    buf = written()
    buf[700, 7, 5] = float("nan")
    res = L.check_destinations([(buf, 0, want)], la)
    assert res["unwritten"] == 1 and not res["ok"]
    buf = written()
    buf[3, 9, 0] = 1.0  # another sender's heads
    res = L.check_destinations([(buf, 0, want)], la)
    assert res["stray"] == 1 and not res["ok"]
    buf = written()
    buf[5, 7, 1] += 1.0
    res = L.check_destinations([(buf, 0, want)], la)
    assert res["max_abs_diff"] >= 0.5 and not res["ok"] and not res["bitwise_equal"]
