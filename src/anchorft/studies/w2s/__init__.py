"""The weak-to-strong studies over the simulator (`anchorft.w2s`): an experiment's folder (`experiments`), the
sweeps (`sweeps`), the mechanism studies (`mechanisms`) and their plots."""
