"""The GPU kernels hmmgpu ships compiled, and the command that writes them.

Why ship compiled kernels
-------------------------
On a machine that has never run hmmgpu, the first GPU search would compile every kernel shape
its models need, and the first ``hmmgpu sw`` every shape its queries need: numba's pipeline
(typing, lowering and NVVM over kernels whose words are unrolled) takes 4-13 s a kernel on one
core. 600 Pfam models against 29 M residues need 23 kernels (the MSV and Viterbi-filter
shapes of models up to 599 nodes, the bias, packing and Forward-gate kernels): its first run
on a fresh H100 took 40.6 s against 27.9 s warm; the 20 classic Smith-Waterman queries need
nine (13 s of a 14.6 s cold run on the H100, benchmarks/results/sw_e2e_h100_2026-11-27.txt).
The kernels depend only on their shape, the lane binding and the GPU's architecture, not on
the data, so every kernel ``hmmgpu warmup`` compiles is compiled here once, for the GPUs
hmmgpu is measured on (:data:`TARGETS`: the H100 and H200, sm_90, with DPX instructions),
and shipped in :data:`hmmgpu.gpu.runtime.build.SHIPPED_DIR`:

- the search cascade's (:func:`hmmgpu.gpu.cascade.all_specs`) in both MSV lane modes (16-bit
  lanes are the default on sm_90; ``--lanes 8x4`` picks 8-bit ones): every MSV and
  Viterbi-filter shape of the shape tables (:mod:`hmmgpu.gpu.runtime.tuning`, models up to
  4,096 and 3,072 nodes), with the table placement the H100's and H200's shared memory
  gives each, the bias and residue packing kernels, the Forward parser (the F3 gate) in
  both storages, and the Backward parser and domain decoding kernels of ``--postfilter
  hmmgpu``;
- the six kernels of ``--postfilter hmmgpu``'s domain definition
  (:func:`hmmgpu.gpu.domaindef.kernel_specs`: the full-matrix Forward and Backward kernels in
  both storages, the stochastic-trace ensemble kernel, the envelopes' decoding and optimal
  accuracy kernel), which a fresh H100 took about 38 s to compile before they shipped;
- every Smith-Waterman shape of ``hmmgpu sw`` (:func:`hmmgpu.gpu.sw.launch.all_specs`).

:func:`hmmgpu.gpu.runtime.build.load` runs a shipped kernel when the cache has none, so a
fresh sm_90 machine compiles nothing; any other GPU, or code whose kernel source or imported
helpers changed since the files were written, compiles as before (each file holds the digests
of what it was made from). Kernels outside these lists (the J-state-only MSV kernels of the
tests and audit) compile on first use.

Writing them
------------
``python3 -m hmmgpu.gpu.prebuilt_kernels`` (no GPU needed; :mod:`hmmgpu.gpu.runtime.cross_compile`
says what it needs: libNVVM and ``ptxas``) compiles the missing and out-of-date files, in
parallel processes, and removes those of kernels no longer listed; ``--all`` compiles every
one. ``tests/gpu/test_prebuilt_kernels.py`` fails when a shipped kernel no longer matches the
code, saying to run it.
"""
from __future__ import annotations

import sys

from hmmgpu.gpu import cascade, domaindef
from hmmgpu.gpu.runtime import cross_compile
from hmmgpu.gpu.runtime.device import GpuDevice
from hmmgpu.gpu.sw import launch as sw_launch

#: The GPUs whose kernels ship, as :class:`GpuDevice` describes them (what shapes and table
#: placements depend on): the H100 and H200 (sm_90, DPX lane binding; 227 KB of shared memory
#: a block may opt in to, 228 KB an SM).
TARGETS = (GpuDevice(id=0, name="NVIDIA H100 or H200", cc=(9, 0), sm_count=132, smem_per_block_optin=227 << 10,
                     smem_per_sm=228 << 10, simulator=False),)
#: The MSV lane modes whose kernels ship (``--lanes``).
LANES = ("16x2", "8x4")


def specs(device) -> list:
    """Every kernel ``hmmgpu warmup`` compiles for ``device``, in each of :data:`LANES`."""
    search = [s for lanes in LANES for s in cascade.all_specs(device, lanes)]
    return list(dict.fromkeys(search + domaindef.kernel_specs() + sw_launch.all_specs(device)))


def jobs() -> list:
    """(spec, lane binding, compute capability) of every shipped kernel."""
    return [(s, device.lane_binding, device.cc) for device in TARGETS for s in specs(device)]


def stale() -> list:
    """The :func:`jobs` whose shipped file is missing or no longer matches the code."""
    return cross_compile.stale(jobs())


def main(argv=None) -> int:
    """Write every stale shipped kernel (all of them with ``--all``) and remove those no
    longer listed."""
    argv = sys.argv[1:] if argv is None else argv
    written = cross_compile.write_all(jobs(), every="--all" in argv, say=lambda text: print(text, flush=True))
    if not written:
        print("every shipped kernel matches the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
