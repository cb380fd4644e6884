"""FlashAttention fused with the Ulysses post-attention All-to-All (paper §5.3).

``kernel.py`` holds the Triton kernels and launchers, ``config.py`` the validated shape, ``refs.py`` the
float32 reference, SDPA and the destination buffers, ``bench.py`` the measurement on one GPU (other
ranks emulated by host-mapped buffers), ``dist.py`` the same at W ranks. See docs/attention.md."""
