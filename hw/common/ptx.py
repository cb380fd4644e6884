"""Special registers read from Triton kernels through inline PTX (GPU only: the interpreter cannot run them)."""

import triton
import triton.language as tl


@triton.jit
def _globaltimer():
    """%globaltimer in ns (ticks every 32 ns on the H200, measured by the calibration)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _smid():
    """The SM this program runs on."""
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _clock64():
    """%clock64: this SM's cycle counter (ticks at the SM clock, so cycles / %globaltimer ns is the SM clock in GHz)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
