"""``PersistentSm90Split`` (kernel "staggersplit"): the stagger kernel with its last partial wave split along K/V and
merged in the kernel (why and what: ``xstage.hw.attention.fa4_persistent``; the unit order: ``split_plan`` /
``split_unit`` there, ``SplitScheduler`` in ``fa4_schedulers``). Imports flash-attn-4 and the CuTe DSL.

A split tile is two units on neighbouring CTAs, each running FA4's mainloop over one half of the K/V blocks (FA4's
own ``BlockInfo`` split arithmetic: ``is_split_kv`` with the packed split word). Both finalise as FA4 does (O
normalised by the half's row sum, the row LSE). The partner writes, per consumer thread, its O fragment and row
LSEs as they are (both units run the same code, so thread t's fragment in one is thread t's in the other) to its
pair's slot of a global workspace, then its flag (release); the owner waits for the flag (acquire, bounded), merges
elementwise with the LSE weights (FA's split-KV combine: O = sum_i O_i·exp(L_i - L), L = log sum_i exp(L_i)), resets
the flag for the next launch and stores through the stagger epilogue. An owner thread that gives up waiting writes
NaN (the poisoned-output checks see it) and counts itself in the workspace's last word (``split_timeouts``).
"""

import inspect
import math
from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import flash_attn.cute.flash_fwd_sm90 as m90
from cutlass import Float32, Int32
from flash_attn.cute.block_info import BlockInfo
from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
from quack import layout_utils

from xstage.hw.attention.fa4_persistent import SPLIT_THREADS, SPLIT_WORDS, split_word
from xstage.hw.attention.fa4_persistent_kernel import (STAGGER_GROUPS, STORE_WARP, Fa4LayoutError,
                                                       PersistentSm90Stagger)
from xstage.hw.attention.fa4_schedulers import SplitScheduler

PARTNER, OWNER = split_word(2, 0), split_word(2, 1)
SPIN_BOUND = 1 << 22  # an owner thread polls its flag at most this many times (then writes NaN and counts itself)
LOG2E = math.log2(math.e)


@dataclass(frozen=True)
class SplitBlockInfo(BlockInfo):
    """FA4's ``BlockInfo`` (split-KV, packed split word) whose split word is the current unit's, read from the
    scheduler's per-thread register ``cur`` (FA4's SM90 loops call ``get_n_block_min_max(seqlen, m_block)``)."""

    cur: object = None

    @cute.jit
    def get_n_block_min_max(self, seqlen_info, m_block, split_idx=0, num_splits=1):
        return BlockInfo.get_n_block_min_max(self, seqlen_info, m_block, self.cur[0])


class PersistentSm90Split(PersistentSm90Stagger):
    """Only the split's parts are ours: the block range (``split_info``), the send step relative to the unit's
    range, the partner's publish and the owner's merge in the epilogue; the rest is the stagger kernel / FA4."""

    split = True

    def split_info(self, block_info):
        """Trace time, in the producer and in the consumer: the per-thread (split word, pair) register the scheduler
        writes, and the block info that reads it."""
        sched = m90.SingleTileScheduler
        if not (isinstance(sched, type) and issubclass(sched, SplitScheduler)):
            raise Fa4LayoutError("staggersplit: needs the split scheduler (fa4_schedulers.SplitScheduler)")
        if block_info.is_causal or block_info.is_local or block_info.is_split_kv:
            raise Fa4LayoutError("staggersplit: only non-causal, non-local, unsplit forwards")
        cur = cute.make_rmem_tensor((5,), Int32)  # split word, pair, unit, whole, units
        sched.cur = cur
        self.xcur, self.xws = cur, sched.workspace_addr
        # the timeout counter: the workspace's last word (fa4_persistent.split_workspace_bytes, the same SM count)
        self.xctr_off = cutlass.utils.HardwareInfo().get_device_multiprocessor_count() * SPLIT_WORDS * SPLIT_THREADS
        fields = {f: getattr(block_info, f) for f in block_info.__dataclass_fields__}
        self.xinfo = SplitBlockInfo(**{**fields, "is_split_kv": True, "pack_split_idx": True}, cur=cur)
        return self.xinfo

    def load(self, *args, **kw):
        bound = inspect.signature(FlashAttentionForwardSm90.load).bind(self, *args, **kw)
        bound.arguments["block_info"] = self.split_info(bound.arguments["block_info"])
        return PersistentSm90Stagger.load(*bound.args, **bound.kwargs)

    def slot_ptr(self, pair, tidx, word):
        """Word ``word`` of consumer thread ``tidx`` in pair ``pair``'s slot (coalesced: thread fastest)."""
        ws = cute.make_ptr(Float32, self.xws, cute.AddressSpace.gmem, assumed_align=4)
        return ws + (pair * SPLIT_WORDS + word) * SPLIT_THREADS + tidx

    def check_fragment(self, acc_O, lse):
        n, rows = cute.size(acc_O), cute.size(lse)
        if n + rows + 1 != SPLIT_WORDS or cute.size(layout_utils.reshape_acc_to_mn(acc_O), mode=[0]) != rows:
            raise Fa4LayoutError(f"staggersplit: O fragment {n} + {rows} row LSEs + flag != {SPLIT_WORDS} words")
        if self.num_epilogue_threads != SPLIT_THREADS:
            raise Fa4LayoutError(f"staggersplit: {self.num_epilogue_threads} consumer threads != {SPLIT_THREADS}")
        return n, rows

    @cute.jit
    def publish(self, acc_O, lse, pair, tidx):
        """The partner: its normalised O fragment and row LSEs to the pair's slot, then its flag (release)."""
        n, rows = self.check_fragment(acc_O, lse)
        for e in cutlass.range_constexpr(n):
            cute.arch.store(self.slot_ptr(pair, tidx, e), acc_O[e])
        for r in cutlass.range_constexpr(rows):
            cute.arch.store(self.slot_ptr(pair, tidx, n + r), lse[r])
        flag = cute.recast_ptr(self.slot_ptr(pair, tidx, n + rows), dtype=Int32)
        cute.arch.store(flag, Int32(1), sem="release", scope="gpu")

    @cute.jit
    def merge(self, acc_O, lse, pair, tidx):
        """The owner: wait for the partner's flag (bounded), reset it, and merge its half into acc_O."""
        n, rows = self.check_fragment(acc_O, lse)
        flag = cute.recast_ptr(self.slot_ptr(pair, tidx, n + rows), dtype=Int32)
        polls = Int32(0)
        while polls < SPIN_BOUND:
            seen = cute.arch.load(flag, Int32, sem="acquire", scope="gpu")
            polls = cutlass.select_(seen == 1, Int32(SPIN_BOUND + 1), polls + 1)
        if polls > SPIN_BOUND:
            cute.arch.store(flag, Int32(0))  # for the next launch (stream order puts it before that launch's publish)
            other = cute.make_rmem_tensor_like(acc_O, Float32)
            for e in cutlass.range_constexpr(n):
                other[e] = cute.arch.load(self.slot_ptr(pair, tidx, e), Float32, cop="cg")
            mine_mn = layout_utils.reshape_acc_to_mn(acc_O)
            other_mn = layout_utils.reshape_acc_to_mn(other)
            for r in cutlass.range_constexpr(rows):
                l1 = lse[r]
                l2 = cute.arch.load(self.slot_ptr(pair, tidx, n + r), Float32, cop="cg")
                top = cutlass.select_(l1 > l2, l1, l2)
                top = cutlass.select_(top == -Float32.inf, Float32(0.0), top)
                w1 = cute.math.exp2((l1 - top) * LOG2E, fastmath=True)
                w2 = cute.math.exp2((l2 - top) * LOG2E, fastmath=True)
                total = w1 + w2
                inv = cutlass.select_(total > Float32(0.0), Float32(1.0) / total, Float32(0.0))
                a, b = w1 * inv, w2 * inv
                mine_mn[r, None].store(mine_mn[r, None].load() * a + other_mn[r, None].load() * b)
        else:
            acc_O.fill(float("nan"))
            ctr = cute.make_ptr(Int32, self.xws, cute.AddressSpace.gmem, assumed_align=4) + self.xctr_off
            cute.arch.atomic_add(ctr, Int32(1), sem="relaxed", scope="gpu")

    @cute.jit
    def epilogue(self, acc_O, lse, mO, mLSE, sO, seqlen, gmem_tiled_copy_O, tma_atom_O, tiled_mma, tidx,
                 m_block, head_idx, batch_idx):
        word, pair = self.xcur[0], self.xcur[1]
        if word == PARTNER:
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == STORE_WARP:
                self.send_pending()  # the previous tile's send, if its step never came, goes now
            self.publish(acc_O, lse, pair, tidx)
        else:
            if word == OWNER:
                self.merge(acc_O, lse, pair, tidx)
            PersistentSm90Stagger.epilogue(self, acc_O, lse, mO, mLSE, sO, seqlen, gmem_tiled_copy_O, tma_atom_O,
                                           tiled_mma, tidx, m_block, head_idx, batch_idx)

    @cute.jit
    def mma_one_n_block_intrawg_overlap(self, smem_pipe_read, n_block, mma_qk_fn, mma_pv_fn, pipeline_k,
                                        pipeline_v, acc_O, tOrP, smem_copy_params, softmax, seqlen,
                                        scores_scale=None, score_mod_fn=None, mask_fn=None,
                                        check_inf: cutlass.Constexpr = True):
        """The stagger hook with the step counted within the unit's own K/V range (a half for a split unit)."""
        n_min, n_max = self.xinfo.get_n_block_min_max(seqlen, Int32(0))
        due = 1 + (cute.arch.block_idx()[0] % STAGGER_GROUPS) * (n_max - n_min) // (STAGGER_GROUPS * self.stagger_span)
        if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == STORE_WARP:
            if n_max - 1 - n_block == due:
                self.send_pending()
        return FlashAttentionForwardSm90.mma_one_n_block_intrawg_overlap(
            self, smem_pipe_read, n_block, mma_qk_fn, mma_pv_fn, pipeline_k, pipeline_v, acc_O, tOrP,
            smem_copy_params, softmax, seqlen, scores_scale, score_mod_fn, mask_fn, check_inf)


class PersistentSm90Split1(PersistentSm90Split):
    """The split kernel with the sends spread over the whole next unit (as "stagger1")."""

    stagger_span = 1


class PersistentSm90SplitWindow(PersistentSm90Split):
    """The split kernel with each staged tile's send spread over its CTA's whole send window: the K/V steps until
    the CTA next stages a tile (a whole tile, or an owner's merge), across the partner units in between, counted
    down in the stagger slot (word 4). A CTA whose next units are partners keeps its tile pending through them
    (a partner touches no sO), so the last whole wave's sends spread over the split phase, not its first half."""

    stagger_span = 1
    xslot_words = 6  # + the steps left until the pending send is due (word 5 unused: an even slot size)

    @cute.jit
    def window(self, seqlen):
        """Hook calls (interior K/V steps) until this CTA's next staging epilogue, after the current unit."""
        n = (seqlen.seqlen_k + self.tile_n - 1) // self.tile_n
        n_p = (n + 1) // 2  # FA4's split arithmetic: the partner's half (split 0) is ceil(n / 2) blocks
        n_o = n - n_p
        u, whole, units, grid = self.xcur[2], self.xcur[3], self.xcur[4], cute.arch.grid_dim()[0]
        u1 = u + grid
        k1 = u1 - whole
        after = cutlass.select_(u1 + grid < units, cutlass.select_(((k1 + grid) & 1) == 1, n_o - 1, n_p - 1), 0)
        split = cutlass.select_((k1 & 1) == 1, n_o - 1, n_p - 1 + after)
        return cutlass.select_(u1 >= units, Int32(0), cutlass.select_(u1 < whole, n - 1, split))

    @cute.jit
    def epilogue(self, acc_O, lse, mO, mLSE, sO, seqlen, gmem_tiled_copy_O, tma_atom_O, tiled_mma, tidx,
                 m_block, head_idx, batch_idx):
        word, pair = self.xcur[0], self.xcur[1]
        if word == PARTNER:
            self.publish(acc_O, lse, pair, tidx)  # a pending send stays pending: its window runs on
        else:
            if word == OWNER:
                self.merge(acc_O, lse, pair, tidx)
            PersistentSm90Stagger.epilogue(self, acc_O, lse, mO, mLSE, sO, seqlen, gmem_tiled_copy_O, tma_atom_O,
                                           tiled_mma, tidx, m_block, head_idx, batch_idx)
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == STORE_WARP:
                slot = self.slot()
                slot[4] = 1 + (cute.arch.block_idx()[0] % STAGGER_GROUPS) * self.window(seqlen) // (
                    STAGGER_GROUPS * self.stagger_span)

    @cute.jit
    def mma_one_n_block_intrawg_overlap(self, smem_pipe_read, n_block, mma_qk_fn, mma_pv_fn, pipeline_k,
                                        pipeline_v, acc_O, tOrP, smem_copy_params, softmax, seqlen,
                                        scores_scale=None, score_mod_fn=None, mask_fn=None,
                                        check_inf: cutlass.Constexpr = True):
        """Count the pending send's steps down; issue it when they run out."""
        if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == STORE_WARP:
            slot = self.slot()
            if slot[0] == 1:
                slot[4] = slot[4] - 1
                if slot[4] == 0:
                    self.send_pending()
        return FlashAttentionForwardSm90.mma_one_n_block_intrawg_overlap(
            self, smem_pipe_read, n_block, mma_qk_fn, mma_pv_fn, pipeline_k, pipeline_v, acc_O, tOrP,
            smem_copy_params, softmax, seqlen, scores_scale, score_mod_fn, mask_fn, check_inf)


KERNELS = {"staggersplit": PersistentSm90Split, "staggersplit1": PersistentSm90Split1,
           "staggersplitw": PersistentSm90SplitWindow}
