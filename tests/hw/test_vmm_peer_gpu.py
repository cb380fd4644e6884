"""``PeerRange`` on ONE real GPU (marker ``gpu``; skipped without CUDA): W = 2..4 ranks' receive chunks, the
W−1 peers emulated in this process (``LocalPeers``: each a separate ``cuMemCreate`` + POSIX-fd export, imported
by the range as a peer's would be), or W = 2 ranks as two threads exchanging descriptors over real Unix
sockets (``exchange_fds``). Written through the one strided range with torch; read back through each
chunk's own separate mapping: every element where expected, the rest still poison.
On the lent H200: ``pytest -m gpu tests/hw/test_vmm_peer_gpu.py -q``."""

import math
import threading
import uuid

import pytest

pytestmark = pytest.mark.gpu

H, D, POISON = 3, 16, -7  # int32 elements: every value exact, every misplaced one visible
DEV = "cuda:0"


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch", reason="needs a CUDA GPU with torch (torch is not installed here)")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch sees none)")
    pytest.importorskip("cuda.bindings.driver", reason="needs a CUDA GPU with cuda-python (cuda-bindings)")
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda:0")  # the primary context, current on this thread
    return torch


def _gran():
    from xstage.hw.common import vmm_peer

    return vmm_peer.granularity(vmm_peer._driver(), 0)


def _values(torch, rows, salt):
    n = rows * H * D
    return (torch.arange(n, dtype=torch.int32, device=DEV) * 3 + salt).view(rows, H, D)


def _expected_chunk(torch, vals, j, rows, world, rank, stride_el):
    """Chunk j as its own mapping must read: poison, except rank's heads of rows j·rows.. (and pad: poison)."""
    want = torch.full((stride_el,), POISON, dtype=torch.int32, device=DEV)
    used = want[:rows * world * H * D].view(rows, world * H, D)
    used[:, rank * H:(rank + 1) * H] = vals[j * rows:(j + 1) * rows]
    return want


def _run(torch, world, rank, chunk_bytes, chunk_major):
    from xstage.hw.common.vmm_peer import ChunkMapping, LocalPeers, PeerRange

    gran = _gran()
    row_bytes = world * H * D * 4
    assert chunk_bytes % row_bytes == 0
    rows, stride = chunk_bytes // row_bytes, -(-chunk_bytes // gran) * gran
    peers = own = rng = None
    try:
        peers = LocalPeers(world, rank, stride, torch.int32, dev=0)
        rng = PeerRange(chunk_bytes, world, rank, torch.int32, dev=0, exchange=peers.exchange)
        assert rng.chunk_stride == stride and rng.tensor.numel() == world * stride // 4
        own = ChunkMapping(peers.cu, rng.own_handle, stride, 0, torch.int32)
        sep = [own.tensor if j == rank else peers.tensor(j) for j in range(world)]
        for t in sep:
            t.fill_(POISON)
        torch.cuda.synchronize()
        vals = _values(torch, world * rows, salt=11 + rank)
        if chunk_major:  # (W, M/W, W·H, d), batch stride = chunk_stride: works with padded chunks too
            buf = rng.view((world, rows, world * H, D), (stride // 4, world * H * D, D, 1))
            buf[:, :, rank * H:(rank + 1) * H] = vals.view(world, rows, H, D)
        else:  # the uniform [M, W·H, d] receive layout, rank's heads: FA4's out= in the W-rank path
            buf = rng.view((world * rows, world * H, D), (world * H * D, D, 1))
            buf[:, rank * H:(rank + 1) * H] = vals
        torch.cuda.synchronize()
        for j in range(world):
            want = _expected_chunk(torch, vals, j, rows, world, rank, stride // 4)
            bad = int((sep[j] != want).sum())
            assert bad == 0, f"chunk {j}: {bad} of {want.numel()} elements wrong (W={world}, rank={rank})"
            assert torch.equal(rng.chunk(j), sep[j][:chunk_bytes // 4])
        # and the other way: what a peer writes into its own buffer appears in the range
        peer = (rank + 1) % world
        sep[peer][:16] = torch.arange(16, dtype=torch.int32, device=DEV) + 1000
        torch.cuda.synchronize()
        assert rng.tensor[peer * stride // 4:peer * stride // 4 + 16].tolist() == list(range(1000, 1016))
    finally:
        for obj in (own, rng, peers):
            if obj is not None:
                obj.free()


@pytest.mark.parametrize("world,rank", [(1, 0), (2, 0), (3, 1), (4, 3)])
def test_receive_layout_through_the_range_lands_in_every_peers_own_chunk(torch, world, rank):
    row_bytes = world * H * D * 4
    _run(torch, world, rank, math.lcm(_gran(), row_bytes), chunk_major=False)


def test_chunks_rounded_up_to_the_granularity_chunk_major_view(torch):
    world, rank = 2, 1
    row_bytes = world * H * D * 4
    chunk = (_gran() // row_bytes + 3) * row_bytes  # not a multiple of the granularity: padded stride
    assert chunk % _gran()
    _run(torch, world, rank, chunk, chunk_major=True)


def test_two_ranks_as_threads_exchange_real_descriptors_and_see_one_memory(torch):
    from xstage.hw.common.vmm_fds import exchange_fds
    from xstage.hw.common.vmm_peer import PeerRange

    world, gran = 2, _gran()
    row_bytes = world * H * D * 4
    chunk = math.lcm(gran, row_bytes)
    rows, prefix = chunk // row_bytes, f"\0xstage-vmm-test-{uuid.uuid4().hex}-"
    ranges, errors = [None] * world, []

    def rank_main(r):
        try:
            ranges[r] = PeerRange(chunk, world, r, torch.int32, dev=0,
                                  exchange=lambda fd: exchange_fds(fd, r, world, prefix, timeout_s=60))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(f"rank {r}: {type(err).__name__}: {err}")

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors and all(r is not None for r in ranges), errors
        views = [rg.view((world * rows, world * H, D), (world * H * D, D, 1)) for rg in ranges]
        views[0].fill_(POISON)
        vals = [_values(torch, world * rows, salt=100 * r) for r in range(world)]
        for r in range(world):  # each rank writes its heads of every rank's buffer through its own range
            views[r][:, r * H:(r + 1) * H] = vals[r]
        torch.cuda.synchronize()
        want = torch.cat(vals, dim=1)
        for r in range(world):
            assert torch.equal(views[r], want), f"rank {r}'s range does not hold both ranks' writes"
    finally:
        for rg in ranges:
            if rg is not None:
                rg.free()


def test_bad_input_is_one_line_naming_the_field(torch):
    from xstage.errors import InputError
    from xstage.hw.common.vmm_peer import PeerRange

    for kw, field in (({"world": 0}, "world"), ({"chunk_bytes": 0}, "chunk_bytes"), ({"rank": 2}, "rank")):
        args = {"chunk_bytes": 1 << 21, "world": 2, "rank": 0, "dtype": torch.int32, "exchange": lambda fd: []} | kw
        with pytest.raises(ValueError) as info:
            PeerRange(**args)
        assert isinstance(info.value, InputError) and info.value.field == field and "\n" not in str(info.value)
