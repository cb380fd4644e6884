"""Calibration: sweep the microbenchmark over (K, B, G) on a runner (the GPU, or the simulator for a dry
run), fit the platform (``xstage.sim.fit``), check the fit, and write the records. See docs/calibration.md."""
