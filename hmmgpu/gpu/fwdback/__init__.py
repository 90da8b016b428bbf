"""HMMER's Forward and Backward parsers (``p7_ForwardParser``, ``p7_BackwardParser``, impl_sse) and
domain definition's first step (``p7_DomainDecoding``) on the GPU, bit for bit: the kernel texts
(:mod:`.source`, :mod:`.backward_source`, :mod:`.decoding_source`) and their launches, with the
scores formed on the host (:mod:`.launch`); and the full Forward and Backward matrices
(``p7_Forward``, ``p7_Backward``) of the slices domain definition rescores, from the same
recursion (:mod:`.matrix_source`, launched by :mod:`.matrix_launch`). The CPU references beside
them are :mod:`hmmgpu.cpu.fwdback` and :func:`hmmgpu.stages.domaindef.domain_decoding`."""
