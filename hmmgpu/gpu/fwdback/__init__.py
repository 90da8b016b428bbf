"""HMMER's Forward and Backward parsers (``p7_ForwardParser``, ``p7_BackwardParser``, impl_sse) on
the GPU, bit for bit: the kernel texts (:mod:`.source`, :mod:`.backward_source`) and their
launches, with the scores formed on the host (:mod:`.launch`). The CPU reference beside them is
:mod:`hmmgpu.cpu.fwdback`."""
