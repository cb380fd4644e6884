"""The fused MoE FFN (Linear-1 and Linear-2 tiles in one persistent kernel, remote Combine stores;
paper §5.2): ``kernel.py`` (bf16), ``w8a8.py`` (W8A8), ``bench.py`` (one GPU, other ranks emulated by
host-mapped buffers), ``dist.py`` (EP over W GPUs). See docs/moe.md."""
