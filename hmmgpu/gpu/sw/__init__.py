"""Smith-Waterman kernels: the 16-bit DPX scan of :mod:`.source`, launched by :mod:`.launch`."""
