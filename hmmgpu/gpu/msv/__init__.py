"""SSV and J-state MSV filter kernels (:mod:`.source`) and their launches (:mod:`.launch`)."""
