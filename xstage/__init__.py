"""xstage: the X-Stage post-issue pipeline stage, modelled, simulated and measured.

Subpackages:
    xstage.sim         platform model, analytic Burst-Gap equations, simpy X-Stage simulator
    xstage.hw          CUDA / Triton kernels and microbenchmarks (GPU imports are lazy)
    xstage.compare     measured vs simulated frames
    xstage.dashboards  plotly pages drawn from those frames
"""

__version__ = "0.1.0"
