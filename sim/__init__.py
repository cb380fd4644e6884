"""Pure-Python side of xstage: platform model, Burst-Gap equations, simpy X-Stage simulator,
schedules and fused-kernel replay. No GPU imports, no printing, no files (except loading
platform JSON on request)."""
