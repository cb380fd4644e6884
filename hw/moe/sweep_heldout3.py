"""A third held-out MoE sweep: bf16 configurations no sweep, law or rule had measured (issue 15, MoE magnitudes).

``hw/moe/bench.py --sweep heldout3``. (hidden, intermediate) pairs that appear nowhere in ``SWEEP``, ``HELDOUT``
or ``HELDOUT2``, chosen where rule 3 missed on the second held-out sweep: three long-K shapes where the local FFN
is about half of the fused time or more (intermediate 2816-3328, one program per SM, BLOCK_N 256) and one short-K
shape like h2560-i1280 (whose two routings the replay split), both routings, W = EP = 8; Combine buffers up to
~300 MB (the copy engine stays at ~52 GB/s there). Predictions committed before the run
(``data/predictions/moe-rule4-preregistered.json``). Entries as ``bench.catalog_sweep``'s: (model, hidden,
intermediate, tokens, routing, precision, world_size, local experts).
"""

SHAPES = ((3584, 3072, 28672, 8), (4608, 2816, 32768, 16), (2048, 3328, 20480, 4), (3584, 1280, 28672, 16))

HELDOUT3 = [("heldout3", h, i, t, r, "bf16", 8, e) for (h, i, t, e) in SHAPES for r in ("balanced", "skewed")]
