"""The variants the attention benches time, by name, and their inputs.

``FUSED_OPTIONS``: the fused send options tried (store cache operator, drip, split tail, stagger, tail
parts), named by ``fused_tag``; ``kernel_variants``: {name: launch} of one configuration (FA-only,
Fused with every option, Serial and its All-to-All alone with every store cache operator);
``sdpa_backends``: the SDPA baselines (none in a CPU dry run). The kernels (triton) are imported
inside ``kernel_variants``.
"""

from dataclasses import replace

from xstage.hw.attention.config import FUSED_FIELDS
from xstage.hw.attention.refs import reference_attention
from xstage.hw.common.timing import device

SDPA_BACKENDS = ("cudnn", "flash")
STORE_CACHES = (".wt", "", ".cs")  # write-through, default (write-back), streaming
# (store cache, drip, split_tail, stagger, tail_parts): tail_parts 2 = halves. The balanced split (tail_parts=0,
# 11 parts on 132 SMs) measured 1038 vs 793 us FA-only at 16K (each merge on the last-arriving part's program
# makes it the last arriver of its next tile too): benchmarks/attention_overhead.py keeps timing it.
FUSED_OPTIONS = (
    ("", False, False, False, 2), (".wt", False, False, False, 2), ("", False, True, False, 2),
    ("", True, True, False, 2), ("", False, False, True, 2), ("", False, True, True, 2), (".wt", False, True, True, 2))
def store_tag(store_cache: str) -> str:
    """Variant suffix of a store cache operator: "" → "_wb", ".wt" → "_wt", ".cs" → "_cs"."""
    return "_" + (store_cache.lstrip(".") or "wb")


def fused_tag(store_cache: str, drip: bool, split_tail: bool = False, stagger: bool = False, tail_parts: int = 2) -> str:
    split = ("_split" + {2: "", 0: "bal"}.get(tail_parts, str(tail_parts))) if split_tail else ""
    return store_tag(store_cache) + ("_drip" if drip else "") + split + ("_stagger" if stagger else "")


def fused_choice(cfg) -> tuple:
    """The ``FUSED_OPTIONS`` tuple that ``cfg`` has."""
    return tuple(getattr(cfg, f) for f in FUSED_FIELDS)


def fused_options(cfg, opt: tuple):
    """``cfg`` with one ``FUSED_OPTIONS`` tuple applied."""
    return replace(cfg, **dict(zip(FUSED_FIELDS, opt, strict=True)))


def sdpa_backends() -> tuple:
    """The SDPA backends timed as baselines (none in a CPU dry run: the transfer needs a GPU)."""
    return SDPA_BACKENDS if device() == "cuda" else ()


def random_qkv(cfg, seed: int):
    """Fresh bf16 (q, k, v) of ``cfg``'s shape (M, H, d) on this device."""
    import torch

    gen = torch.Generator(device=device()).manual_seed(seed)
    shape = (cfg.seq_len, cfg.heads, cfg.head_dim)
    return [torch.randn(shape, device=device(), generator=gen).to(torch.bfloat16) for _ in range(3)]


def reference(q, k, v):
    """float32 attention of the sender's rows (``refs.reference_attention``) on the memory-efficient or math SDPA."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        return reference_attention(q, k, v)


def kernel_variants(cfg, q, k, v, out, table) -> tuple:
    """The Triton variants of one configuration, {name: callable} and {name: cfg}: FA-only into ``out``;
    Fused with ``cfg``'s (store cache, drip) as "fused" and every other ``FUSED_OPTIONS`` pair as
    "fused_<tag>"; Serial and its All-to-All alone ("a2a") with every ``STORE_CACHES`` operator."""
    from xstage.hw.attention import kernel as A

    fns = {"fa": lambda: A.launch_fa(q, k, v, cfg, out=out)}
    variant_cfg = {"fa": cfg}
    chosen = fused_choice(cfg)
    for opt in [chosen] + [o for o in FUSED_OPTIONS if o != chosen]:  # "fused" = the chosen one
        c, tag = fused_options(cfg, opt), "" if opt == chosen else fused_tag(*opt)
        fns[f"fused{tag}"] = lambda c=c: A.launch_fa(q, k, v, c, dest_table=table)
        variant_cfg[f"fused{tag}"] = c
    for store in [cfg.store_cache] + [m for m in STORE_CACHES if m != cfg.store_cache]:
        c, tag = replace(cfg, store_cache=store), "" if store == cfg.store_cache else store_tag(store)
        fns[f"serial{tag}"] = lambda c=c: A.launch_a2a(A.launch_fa(q, k, v, c, out=out), table, c)
        fns[f"a2a{tag}"] = lambda c=c: A.launch_a2a(out, table, c)
        variant_cfg.update({f"serial{tag}": c, f"a2a{tag}": c})
    return fns, variant_cfg
