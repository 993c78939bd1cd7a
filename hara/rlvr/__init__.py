"""Group-based RLVR: presets, rewards and the TRL adapter."""
