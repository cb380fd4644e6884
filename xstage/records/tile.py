"""Tile records: one row per output tile of a fused kernel (MoE FFN, FlashAttention), from the
GPU kernels' clock logs or from the simulator's replay alike.

Each tile runs a mainloop on one SM (``mainloop_start(us)`` .. ``mainloop_end(us)``), then its
epilogue issues ``bytes_remote`` bytes of remote stores (``issue_start(us)`` .. ``issue_end(us)``,
the remote-store span; 0 bytes for a local epilogue). ``mma_stall(us)`` is how long the MMA waited
for a free staging slot before the mainloop (NaN where the kernel does not log it). A file
usually holds several runs (configurations x schedules), told apart by ``RUN_KEYS``.
"""

KIND = "tile"

COLUMNS = (
    ("source", ""), ("platform", ""), ("experiment", ""), ("config", ""), ("schedule", ""),
    ("sm", ""), ("seq", ""), ("kind", ""), ("expert", ""), ("m", ""), ("n", ""),
    ("bytes_remote", "bytes"),
    ("mainloop_start(us)", "us"), ("mainloop_end(us)", "us"),
    ("issue_start(us)", "us"), ("issue_end(us)", "us"),
    ("mma_stall(us)", "us"),
)

RUN_KEYS = ("source", "platform", "experiment", "config", "schedule")
OPTIONAL_RUN_KEYS = ("rank",)
