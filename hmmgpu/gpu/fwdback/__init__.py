"""HMMER's Forward parser (``p7_ForwardParser``, impl_sse) on the GPU, bit for bit: the kernel
text (:mod:`.source`) and its launches, with the score formed on the host (:mod:`.launch`).
The CPU reference beside it is :mod:`hmmgpu.cpu.fwdback`."""
