"""The RPSFT paper's settings that several modules default to, written once (Jin et al., arXiv:2605.10973).

A leaf module (it imports nothing), so the light option classes and the torch-side anchor read the same number.
"""

__all__ = ["PAPER_RANK"]

PAPER_RANK = 768  # k of the anchored subspaces, of Llama-3.1-8B's width 4096: every anchor rank's one default
