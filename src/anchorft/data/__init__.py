"""Fine-tuning data preparation (OpenR1-Math for the RPSFT paper's runs)."""

from anchorft.data.openr1 import SYSTEM_PROMPT, prepare_openr1_math

__all__ = ["SYSTEM_PROMPT", "prepare_openr1_math"]
