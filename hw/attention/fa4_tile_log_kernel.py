"""Per-CTA tile timers for the PersistentSm90 kernels (``fa4_tile_log`` says what is logged and how it is laid out).

``logged_class(cls, addr, slots)`` is a subclass of one of our kernel classes (``fa4_persistent.kernel_class``)
that also stamps ``%globaltimer``: one consumer thread per CTA (thread ``LOG_THREAD``, lane 0 of FA4's store warp)
writes, for the k-th unit its CTA runs (slot k), the mainloop start (entry of FA4's first K/V half-block), the
mainloop end (entry of the epilogue), the send issue (just before the tile's TMA store is issued; the drain kernels:
right after their epilogue, which issues it) and the tile's coordinates into int64 words of a global buffer whose
address and slot count are compiled in. A slot at or past ``slots`` is not written (bounded; nothing waits).
The default classes are not touched: the log exists only in these subclasses (their own compile cache:
``fa4_persistent.installed``). Imports flash-attn-4 and the CuTe DSL.
"""

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64
from flash_attn.cute import utils

from xstage.hw.attention.fa4_persistent import split_word
from xstage.hw.attention.fa4_tile_log import FIELD, LOG_FIELDS
from xstage.hw.attention.fa4_persistent_kernel import STORE_WARP

LOG_THREAD = STORE_WARP * cute.arch.WARP_SIZE  # the store warp's lane 0: it also issues the stagger sends
PARTNER = split_word(2, 0)


class TileLog:
    """The logging methods; ``logged_class`` puts them in front of a kernel class (``_base``)."""

    _base = None
    tile_log_addr = 0
    tile_log_slots = 0

    def log_ptr(self, slot, field: int):
        base = cute.make_ptr(Int64, self.tile_log_addr, cute.AddressSpace.gmem, assumed_align=8)
        return base + (cute.arch.block_idx()[0] * self.tile_log_slots + slot) * len(LOG_FIELDS) + field

    @cute.jit
    def log_now(self, slot: Int32, field: cutlass.Constexpr):
        if cute.arch.thread_idx()[0] == LOG_THREAD:
            if slot < self.tile_log_slots:
                cute.arch.store(self.log_ptr(slot, field), cute.arch.globaltimer())

    @cute.jit
    def log_tile(self, slot: Int32, m_block: Int32, head_idx: Int32, batch_idx: Int32, word: Int32):
        if cute.arch.thread_idx()[0] == LOG_THREAD:
            if slot < self.tile_log_slots:
                cute.arch.store(self.log_ptr(slot, FIELD["m_block"]), Int64(m_block))
                cute.arch.store(self.log_ptr(slot, FIELD["head"]), Int64(head_idx))
                cute.arch.store(self.log_ptr(slot, FIELD["batch"]), Int64(batch_idx))
                cute.arch.store(self.log_ptr(slot, FIELD["sm"]), Int64(utils.smid()))
                cute.arch.store(self.log_ptr(slot, FIELD["split_word"]), Int64(word))

    def mma(self, *args, **kw):
        # per-thread registers: the slot of the unit being run, the slot of the staged (pending) tile
        self.xlog = cute.make_rmem_tensor((2,), Int32)
        self.xlog[0] = Int32(0)
        self.xlog[1] = Int32(-1)
        return self._base.mma(self, *args, **kw)

    def first_half_block_overlap(self, *args, **kw):
        self.log_now(self.xlog[0], FIELD["start_ns"])
        return self._base.first_half_block_overlap(self, *args, **kw)

    def epilogue(self, acc_O, lse, mO, mLSE, sO, seqlen, gmem_tiled_copy_O, tma_atom_O, tiled_mma, tidx,
                 m_block, head_idx, batch_idx):
        slot = self.xlog[0]
        self.log_now(slot, FIELD["end_ns"])
        word = self.xcur[0] if self.split else Int32(split_word(1, 0))
        self.log_tile(slot, m_block, head_idx, batch_idx, word)
        self._base.epilogue(self, acc_O, lse, mO, mLSE, sO, seqlen, gmem_tiled_copy_O, tma_atom_O, tiled_mma, tidx,
                            m_block, head_idx, batch_idx)
        self.log_after(slot, word)

    @cute.jit
    def log_after(self, slot: Int32, word: Int32):
        if cutlass.const_expr(self.stagger_send):
            # a partner stages nothing (its pending tile, if any, stays pending)
            self.xlog[1] = cutlass.select_(word != PARTNER, slot, self.xlog[1])
        else:  # the drain kernels' epilogue has issued the store
            self.log_now(slot, FIELD["send_ns"])
        self.xlog[0] = slot + 1

    @cute.jit
    def send_pending(self):
        if self.slot()[0] == 1:
            self.log_now(self.xlog[1], FIELD["send_ns"])
        self._base.send_pending(self)


_CLASSES = {}


def logged_class(cls, addr: int, slots: int):
    """``cls`` with the tile log into ``slots`` slots per CTA at device address ``addr`` (compiled in)."""
    if addr <= 0 or addr % 8 or slots < 1:
        raise ValueError(f"tile log: address {addr:#x} / slots {slots} (needs an 8-B aligned address, slots >= 1)")
    key = (cls, addr, slots)
    if key not in _CLASSES:
        _CLASSES[key] = type(f"{cls.__name__}TileLog", (TileLog, cls),
                             {"_base": cls, "tile_log_addr": addr, "tile_log_slots": slots})
    return _CLASSES[key]
