"""The remote-store microbenchmark: a CuPy/NVRTC kernel (``microbench.cu``) whose K producers each issue
bursts of B bytes with 16-byte stores to a target (host-mapped PCIe, local HBM, or a peer over NVLink),
separated by a gap, and log %globaltimer at issue start and end. ``runner.py`` builds, launches,
verifies the written pattern (its aggregate figures: ``xstage.sim.burst_summary``). See docs/calibration.md."""
