"""The step parity harness against the reference semantics in PyTorch: ``python -m bench.parity.parity``."""
