"""Token-embedding initialization for transformers, as PyTorch Lightning callbacks and modules."""

__version__ = "0.1.0.dev0"
