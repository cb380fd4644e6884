"""``PersistentSm90``: FA4's SM90 forward, persistent, with sO apart from sQ and each tile's O store drained
behind the next tile's mainloop (why and how: ``xstage.hw.attention.fa4_persistent``, which imports this
module lazily: importing it imports flash-attn-4 and the CuTe DSL, the ``[gpu]`` extra)."""

import inspect
from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
import flash_attn.cute.flash_fwd_sm90 as m90
from flash_attn.cute import utils
from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
from flash_attn.cute.named_barrier import NamedBarrierFwd
from quack import copy_utils

from xstage.hw.attention.fa4_schedulers import DynamicScheduler, init_ring

EPI = int(NamedBarrierFwd.Epilogue)
STORE_WARP = 4  # FA4's epilogue: the first consumer warp issues the TMA store of O
STAGGER_GROUPS, STAGGER_SPAN = 16, 2  # stagger: CTA b sends at K/V step 1 + (b mod 16)·n / (16·2) (as the Triton kernel)


def dynamic() -> bool:
    """Trace time: is the scheduler FA4 reads (its module global, rebound by ``fa4_persistent.installed``) ours?"""
    sched = m90.SingleTileScheduler
    return isinstance(sched, type) and issubclass(sched, DynamicScheduler)


class Fa4LayoutError(RuntimeError):
    """The installed FA4's forward does not have the structure PersistentSm90 overrides (checked at trace time,
    before anything runs): a configuration it does not cover, or an FA4 version whose shared storage moved."""


class PersistentSm90(FlashAttentionForwardSm90):
    """Only these methods are ours; the rest (producer, mainloop, softmax, scheduler loop) is FA4's."""

    stagger_send = False  # PersistentSm90Stagger: the send is issued inside the next mainloop
    split = False  # PersistentSm90Split (fa4_split_kernel): the block range read from the split scheduler's unit
    xslot_words = 4  # the stagger slot: flag, m_block, head, batch (+ the window kernel's step counter)

    def _get_shared_storage_cls(self):
        """FA4's storage with the sQ range doubled: [sQ | sO] (Python, at trace time inside FA4's __call__)."""
        if self.Q_in_regs or self.pack_gqa or self.varlen_q:
            raise Fa4LayoutError("PersistentSm90: only dense forwards (no Q_in_regs, pack_gqa, varlen)")
        nq, no = cute.cosize(self.sQ_layout), cute.cosize(self.sO_layout)
        if nq != no:
            raise Fa4LayoutError(f"PersistentSm90: sQ and sO must be the same size ({nq} != {no})")
        fields = dict(getattr(super()._get_shared_storage_cls(), "_annotations", {}))
        if "sQ" not in fields:
            raise Fa4LayoutError("PersistentSm90: FA4's shared storage has no sQ field")
        # 1024-B aligned like FA4's buffers (the 128-B swizzle's period); sO starts nq elements in (32 KiB)
        fields["sQ"] = cute.struct.Align[cute.struct.MemRange[self.dtype, nq + no], self.buffer_align_bytes]
        # small slots in the padding before sV, reached from the Q mbarrier pointer (the one smem pointer both
        # load and mma get that is not swizzled): the stagger kernel's pending send (flag, m_block, head, batch),
        # the dynamic scheduler's tile ring (two tagged words)
        extra = {"xslot": self.xslot_words} if self.stagger_send else {}
        if dynamic():
            extra["xsched"] = 2
        if not extra:
            return cute.struct(type("SharedStorageSeparateO", (), {"__annotations__": fields}))
        order = list(fields)
        at = order.index("mbar_ptr_V") + 1
        fields = dict([*[(k, fields[k]) for k in order[:at]],
                       *[(k, cute.struct.MemRange[cutlass.Int32, n]) for k, n in extra.items()],
                       *[(k, fields[k]) for k in order[at:]]])
        storage = cute.struct(type("SharedStorageSeparateO", (), {"__annotations__": fields}))
        offsets = getattr(storage, "_offsets", {})
        for k in extra:
            off = offsets.get(k, -1) - offsets.get("mbar_ptr_Q", 0)
            if off < 0 or off % 8:
                raise Fa4LayoutError(f"PersistentSm90: slot {k} is not at a whole Int64 after the Q barriers ({off})")
            setattr(self, f"{k}_off", off // 8)
        return storage

    def load(self, *args, **kw):
        """FA4's producer; with the dynamic scheduler, its tile ring set up first (trace time + one init)."""
        if dynamic():
            bound = inspect.signature(FlashAttentionForwardSm90.load).bind(self, *args, **kw)
            ring = self.smem_slot(bound.arguments["pipeline_q"], self.xsched_off)
            m90.SingleTileScheduler.ring = SimpleNamespace(ptr=ring, producer=True)
            init_ring(ring)
        return FlashAttentionForwardSm90.load(self, *args, **kw)

    @staticmethod
    def smem_slot(pipeline_q, off):
        """An Int32 pointer ``off`` Int64 words after the Q mbarrier."""
        return cute.recast_ptr(pipeline_q.sync_object_full.get_barrier(0) + off, dtype=cutlass.Int32)

    @cute.jit
    def mma(self, tiled_mma_qk, tiled_mma_pv, mO, mLSE, sQ, sK, sVt, sP, sO, learnable_sink, pipeline_k,
            pipeline_v, pipeline_q, gmem_tiled_copy_O, tma_atom_O, tidx, softmax_scale_log2, softmax_scale,
            block_info, SeqlenInfoCls, AttentionMaskCls, TileSchedulerCls, blocksparse_tensors,
            aux_data=utils.AuxData(), fastdiv_mods=None):
        # FA4 laid sO over sQ's start; ours is the second half of the doubled range
        sO_own = cute.make_tensor(sO.iterator + cute.cosize(sO.layout), sO.layout)
        if cutlass.const_expr(self.split):
            block_info = self.split_info(block_info)
        if cutlass.const_expr(dynamic()):
            m90.SingleTileScheduler.ring = SimpleNamespace(ptr=self.smem_slot(pipeline_q, self.xsched_off), producer=False)
        if cutlass.const_expr(self.stagger_send):
            # trace-time only; the slot as a pointer (a tensor written under staged control flow is threaded
            # through it as a new value, so each use makes its own tensor from the pointer: ``slot()``)
            self.xsend = SimpleNamespace(mO=mO, sO=sO_own, tma_atom_O=tma_atom_O,
                                         slot_ptr=self.smem_slot(pipeline_q, self.xslot_off))
            slot = self.slot()
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == STORE_WARP:
                slot[0] = cutlass.Int32(0)  # no send pending
        FlashAttentionForwardSm90.mma(
            self, tiled_mma_qk, tiled_mma_pv, mO, mLSE, sQ, sK, sVt, sP, sO_own, learnable_sink, pipeline_k,
            pipeline_v, pipeline_q, gmem_tiled_copy_O, tma_atom_O, tidx, softmax_scale_log2, softmax_scale,
            block_info, SeqlenInfoCls, AttentionMaskCls, TileSchedulerCls, blocksparse_tensors, aux_data,
            fastdiv_mods)
        if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == STORE_WARP:
            if cutlass.const_expr(self.stagger_send):
                self.send_pending()  # the last tile
            cute.arch.cp_async_bulk_wait_group(0, read=True)  # the last tile's store has read sO before exit

    def slot(self):
        """The stagger kernel's pending-send slot (flag, m_block, head, batch) in shared memory, as a new tensor."""
        return cute.make_tensor(self.xsend.slot_ptr, cute.make_layout(self.xslot_words))

    @cute.jit
    def send_pending(self):
        """The stagger kernel: issue the staged tile's TMA store if one is pending (store warp only)."""
        x, slot = self.xsend, self.slot()
        gO = cute.local_tile(x.mO[None, None, slot[2], slot[3]], (self.tile_m, self.tile_hdimv), (slot[1], 0))
        store_O, _, _ = copy_utils.tma_get_copy_fn(x.tma_atom_O, 0, cute.make_layout(1), x.sO, gO, single_stage=True)
        if slot[0] == 1:
            store_O()
            cute.arch.cp_async_bulk_commit_group()
            slot[0] = cutlass.Int32(0)

    @cute.jit
    def epilogue(self, acc_O, lse, mO, mLSE, sO, seqlen, gmem_tiled_copy_O, tma_atom_O, tiled_mma, tidx,
                 m_block, head_idx, batch_idx):
        """acc → bf16 → sO → one TMA store, as FA4's TMA-O path, the read-wait moved to the next epilogue."""
        rO = cute.make_fragment_like(acc_O, self.dtype)
        rO.store(acc_O.load().to(self.dtype))
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == STORE_WARP:  # the previous tile's store (issued one mainloop ago) has read sO
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.barrier(barrier_id=EPI, number_of_threads=self.num_epilogue_threads)
        atom = utils.get_smem_store_atom(self.arch.major * 10 + self.arch.minor, self.dtype)
        thr = cute.make_tiled_copy_C(atom, tiled_mma).get_slice(tidx)
        cute.copy(atom, thr.retile(rO), thr.partition_D(sO))
        cute.arch.fence_view_async_shared()  # the smem writes visible to the TMA unit
        cute.arch.barrier_arrive(barrier_id=EPI, number_of_threads=self.num_epilogue_threads + cute.arch.WARP_SIZE)
        mO_cur = seqlen.offset_batch_Q(mO, batch_idx, dim=3)[None, None, head_idx]
        gO = cute.local_tile(mO_cur, (self.tile_m, self.tile_hdimv), (m_block, 0))
        store_O, _, _ = copy_utils.tma_get_copy_fn(tma_atom_O, 0, cute.make_layout(1), sO, gO, single_stage=True)
        if warp_idx == STORE_WARP:
            cute.arch.barrier(barrier_id=EPI, number_of_threads=self.num_epilogue_threads + cute.arch.WARP_SIZE)
            store_O()
            cute.arch.cp_async_bulk_commit_group()  # no wait: the next epilogue (or the end of mma) waits


class PersistentSm90WaitEnd(PersistentSm90):
    """Diagnostic: persistent, sO apart, but FA4's own epilogue (the read-wait right after the store)."""

    epilogue = FlashAttentionForwardSm90.epilogue


class PersistentSm90Lsu(PersistentSm90):
    """Diagnostic: persistent, sO apart, O stored by FA4's own non-TMA epilogue (all 256 consumer threads
    st.global from registers; the TMA unit then carries only the Q/K/V loads)."""

    epilogue = FlashAttentionForwardSm90.epilogue

    def _setup_attributes(self):
        self.use_tma_O = False  # FA4's __call__ sets it just before; its epilogue has the non-TMA path
        super()._setup_attributes()




class PersistentSm90Stagger(PersistentSm90):
    """PersistentSm90 with the send staggered across CTAs (the Triton kernel's ``stagger``): the epilogue only
    stages the tile in sO; the store warp issues its TMA store at K/V step 1 + (b mod 16)·n/32 of the CTA's
    next mainloop (n = K/V steps of a Q-loop), so the 132 CTAs' sends spread over half a Q-loop instead of
    landing together; a send not yet issued when the next epilogue comes goes first, the last at the end."""

    stagger_send = True
    stagger_span = STAGGER_SPAN  # the sends spread over 1 / span of the next mainloop

    @cute.jit
    def epilogue(self, acc_O, lse, mO, mLSE, sO, seqlen, gmem_tiled_copy_O, tma_atom_O, tiled_mma, tidx,
                 m_block, head_idx, batch_idx):
        slot = self.slot()
        rO = cute.make_fragment_like(acc_O, self.dtype)
        rO.store(acc_O.load().to(self.dtype))
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == STORE_WARP:
            self.send_pending()  # a send still pending (its due step never came) goes before sO is reused
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.barrier(barrier_id=EPI, number_of_threads=self.num_epilogue_threads)
        atom = utils.get_smem_store_atom(self.arch.major * 10 + self.arch.minor, self.dtype)
        thr = cute.make_tiled_copy_C(atom, tiled_mma).get_slice(tidx)
        cute.copy(atom, thr.retile(rO), thr.partition_D(sO))
        cute.arch.fence_view_async_shared()
        cute.arch.barrier_arrive(barrier_id=EPI, number_of_threads=self.num_epilogue_threads + cute.arch.WARP_SIZE)
        if warp_idx == STORE_WARP:
            cute.arch.barrier(barrier_id=EPI, number_of_threads=self.num_epilogue_threads + cute.arch.WARP_SIZE)
            slot[1] = m_block
            slot[2] = head_idx
            slot[3] = batch_idx
            slot[0] = cutlass.Int32(1)  # staged: sent at this CTA's due step of the next mainloop

    @cute.jit
    def mma_one_n_block_intrawg_overlap(self, smem_pipe_read, n_block, mma_qk_fn, mma_pv_fn, pipeline_k,
                                        pipeline_v, acc_O, tOrP, smem_copy_params, softmax, seqlen,
                                        scores_scale=None, score_mod_fn=None, mask_fn=None,
                                        check_inf: cutlass.Constexpr = True):
        n = (seqlen.seqlen_k + self.tile_n - 1) // self.tile_n
        due = 1 + (cute.arch.block_idx()[0] % STAGGER_GROUPS) * n // (STAGGER_GROUPS * self.stagger_span)
        if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == STORE_WARP:
            if n - 1 - n_block == due:
                self.send_pending()
        return FlashAttentionForwardSm90.mma_one_n_block_intrawg_overlap(
            self, smem_pipe_read, n_block, mma_qk_fn, mma_pv_fn, pipeline_k, pipeline_v, acc_O, tOrP,
            smem_copy_params, softmax, seqlen, scores_scale, score_mod_fn, mask_fn, check_inf)


class PersistentSm90Stagger1(PersistentSm90Stagger):
    """The stagger kernel with the sends spread over the whole next mainloop (step 1 + (b mod 16)·n/16): half the
    posting rate of "stagger" while a wave's 132 tiles drain."""

    stagger_span = 1


KERNELS = {"drain": PersistentSm90, "waitend": PersistentSm90WaitEnd, "lsu": PersistentSm90Lsu,
           "stagger": PersistentSm90Stagger, "stagger1": PersistentSm90Stagger1}
