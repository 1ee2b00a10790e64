"""anchorft: fine-tuning that keeps what pretraining learned."""

__version__ = "0.1.0"
