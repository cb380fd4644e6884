"""A second held-out MoE sweep: bf16 configurations no sweep, law or rule had measured (issue 15, MoE magnitudes).

``hw/moe/bench.py --sweep heldout2``. (hidden, intermediate) pairs and token counts that appear nowhere in
``SWEEP`` or ``HELDOUT`` (hidden 2560 / 3072 / 5120 / 6144, intermediate 768 / 1024 / 1280 / 2560 / 3584, 4-32
local experts), both routings, W = EP = 8: four at short K (I <= 1536: two programs per SM, BLOCK_N 128) and four
at long K (one program per SM, BLOCK_N 256), two of them with Combine buffers of 460-500 MB (measured: only the
503 MB one copied slowly, 38.7-40.3 GB/s). The predictions for them were committed before they ran (commit
333d725, ``data/predictions/moe-rule3-preregistered.json``; measured in ``data/moe/run-333d725-heldout2``).
Entries as ``bench.catalog_sweep``'s: (model, hidden, intermediate, tokens, routing, precision, world_size,
local experts).
"""

SHAPES = ((2560, 1280, 24576, 16), (3072, 768, 32768, 32), (5120, 1280, 20480, 8), (6144, 1024, 40960, 24),
          (3072, 2560, 24576, 8), (5120, 2560, 36864, 16), (2560, 3584, 16384, 4), (5120, 3584, 45056, 16))

HELDOUT2 = [("heldout2", h, i, t, r, "bf16", 8, e) for (h, i, t, e) in SHAPES for r in ("balanced", "skewed")]
