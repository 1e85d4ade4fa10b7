"""ckpt: make quantized Mixture-of-Experts checkpoints ready for vLLM, and prove that they are."""

__version__ = "0.1.0"
