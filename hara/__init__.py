"""HarA: hierarchical credit assignment for group-based RLVR on Fused Gromov-Wasserstein geometry."""

import os

__version__ = "0.1.0"

# A waiting OpenMP thread that spins holds a core its descheduled sibling needs: a 2-thread torch job on 2 cores
# beside any other busy process ran 5x slower with OpenMP's default policy than with passive waiting
# (benchmarks/bench_omp_wait.py; the warm-up at 0.5-1 steps/s against 20 alone). libgomp reads this once, when torch
# loads it, so it is set here, before any hara module imports torch; a user's own setting wins. Scheduling only: the
# numbers computed are the same.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
