"""The CPU implementations of the stages: pyhmmer end to end, the exact numba filters, and libhmmer through ctypes (the oracle and the fallback)."""
