"""HarA: hierarchical credit assignment for group-based RLVR on Fused Gromov-Wasserstein geometry."""

__version__ = "0.1.0"
