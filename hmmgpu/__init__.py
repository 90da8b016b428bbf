"""hmmgpu: HMMER3 protein search with exact answers, with GPU filter kernels."""
__version__ = "0.1.0"
