"""The full-matrix Forward and Backward kernels (``p7_Forward``, ``p7_Backward``): what they
compute, why they are exact, why the code looks as it does.

What is computed
----------------
Domain definition reruns HMMER's Forward and Backward with ``do_full = 1`` on slices of an F3
passer (hmmer-domaindef-spec.md): on a clustered region ``i..j`` the multihit Forward matrix,
which the stochastic traces sample (the ensemble kernel, :mod:`hmmgpu.gpu.ensemble`), and on
each envelope ``i..j`` the unihit Forward and Backward matrices, which posterior decoding and
optimal accuracy read (the envelope kernel, :mod:`hmmgpu.gpu.envelope`). Both run on the
residues ``dsq[i..j]`` alone with the length model of the WHOLE target (``pmove``, ``ploop`` of
its length L) and, for an envelope, the unihit special transitions (E moves to C with
probability 1, ``nj = 0``: :func:`hmmgpu.cpu.fwdback.unihit_tables`). The CPU references are
:func:`hmmgpu.cpu.fwdback.forward_matrix` and :func:`~hmmgpu.cpu.fwdback.backward_matrix`, which
are the parsers with every row kept; and so are these kernels: HMMER's engines with
``do_full`` do the parsers' arithmetic, row for row, and keep each row.

For each job of a launch (a slice of ``Ld`` residues, its model, its four special transitions
``pmove ploop xf[E][MOVE] xf[E][LOOP]``) the Forward kernel writes

* every row's cells ``dp[i][s][q][z]`` (states M, D, I; row 0 zero) at ``out_cells[cell_base[k]:]``,
  the layout of :class:`hmmgpu.cpu.fwdback.StripedMatrix` (float ``((3 i + s) Q + q) 4 + z`` of
  the job's block), as the ensemble and envelope kernels read them;
* every row's specials ``xmx[i][E N J B C SCALE]`` at ``out_rows[row_base[k]:]`` (6 floats a row);
* the final ``xC`` and the scale factors of the rescaled rows (``out_scales[scale_base[k]:]``,
  ``out_nscale[k]`` of them), from which the host forms ``totscale`` and the score with libm's
  ``log`` (:func:`hmmgpu.stages.forward.forward_totscale`, :func:`~hmmgpu.stages.forward.forward_score`);
* the exactness flags of the CPU reference.

The Backward kernel runs after it on the same stream and reads Forward's SCALE column, as
``p7_Backward`` reuses ``fwd``'s scale factors (Backward's own after a B above 1e16:
``has_own_scales``), and writes its cells (row 0 zero: HMMER computes none) and rows at the same
offsets of its own arrays, ``has_own_scales``, its flags, row 0's N and its scale factors as
``backward_engine`` takes their logarithms (row L's, then each rescaled row's from L-1 down to
1), from which the host forms ``totscale`` and the score
(:func:`hmmgpu.stages.forward.backward_score_from_scales`).

Why the result is exact
-----------------------
The recursion is the parser kernels' own, emitted by the same generator functions
(:func:`hmmgpu.gpu.fwdback.source.forward_rows`, :func:`hmmgpu.gpu.fwdback.backward_source.backward_rows`):
HMMER's striped layout and tables, its order of float operations, each one an explicitly
rounded IEEE operation (never contracted into a fused multiply-add), IEEE subnormals. A
full matrix adds only stores: after a row is rescaled (its cells multiplied by ``1/scale``, as
HMMER multiplies its ``dpc`` row), the thread copies its lane's 3 Q cells to the matrix, which is
what ``do_full`` keeps (HMMER reads row i-1 from the matrix where the parser reads its one row
buffer: the same values). The flags are the parsers' (a full matrix's are the CPU reference's:
:func:`~hmmgpu.cpu.fwdback.forward_matrix` returns the parser's flags, Backward's with Forward's
OR-ed in, which the host does).

Why the code looks as it does
-----------------------------
The parsers' thread mapping (:mod:`.source`): a group of four threads per job, thread z its
SSE lane z, the row in shared memory or in a global scratch array, one kernel for every model
(Q per model), jobs claimed from an atomic counter in the launch's order (costliest first).
What differs from the parsers is where a job comes from: a slice of residues packed into
word-aligned words (``word_offsets[k]``, read as the parsers read the resident database) with
its own length ``lengths[k] = Ld``, and its special transitions per job (``item_xf[4k:4k+4]``)
instead of per-length and per-model tables, so that regions (multihit) and envelopes (unihit)
of any targets share a launch. Each thread writes its own lane's cells: the four threads of a
group write four consecutive words.

Where the rows fit in shared memory, the kernels are the segmented parsers'
(:func:`segmented_forward_body`, :func:`segmented_backward_body`: a warp a job, the cells that
read only the row before spread over eight segments, the chains along the row by segment 0's
four threads; the module text of :mod:`.source` says why), and after each row the group copies
the rescaled row from its buffer (M, I and D blocks) to the matrix (M, D, I), each thread every
32nd float. A definitions' launch
lasts as long as its longest job (Nsight Compute on one H200: blocks of four threads at 2-12%
of the warps a multiprocessor holds, docs/performance.md), and the segmented parser runs a
target in about a third of the group of four's time. The same operations on the same values in
the same order, so the same bits: the simulator's test compares every cell with the CPU
references and libhmmer, and the GPU's digest of a fixed set of definitions
(``benchmarks/define_batches.py``) is unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

from hmmgpu.gpu.fwdback.backward_source import backward_rows, seg_backward_rows
from hmmgpu.gpu.fwdback.source import (
    SCRATCH_PER_Q, claim_item, forward_rows, forward_start, group_head, indented, model_head, module_lines,
    seg_forward_rows, segmented_buffers, segmented_head, store_specials)
from hmmgpu.gpu.runtime.emit import Emitter, kernel_module
from hmmgpu.gpu.runtime.kargs import Arg
from hmmgpu.stages.forward import OWN_SCALES_AT

#: Parameters both matrix kernels take, in order: the jobs (slice k: ``lengths[k]`` residues
#: packed four a word from ``residues[word_offsets[k]]``, model ``item_model[k]``, its special
#: transitions ``item_xf[4k:4k+4]`` = pmove, ploop, xf[E][MOVE], xf[E][LOOP]), the order in which
#: they are claimed (``items``), the models' tables as the parser kernels take them
#: (:data:`hmmgpu.gpu.fwdback.source.ARGS`; ``model_f[3m + 2]`` the smallest B->M transition), the
#: rows' scratch, and where each job's specials (``row_base``), cells (``cell_base``) and scale
#: factors (``scale_base``) go.
JOB_ARGS = (
    Arg("residues", "uint32[:]"), Arg("word_offsets", "int64[:]"), Arg("lengths", "int32[:]"),
    Arg("items", "int32[:]"), Arg("item_model", "int32[:]"), Arg("item_xf", "float32[:]"), Arg("n_items", "int32"),
    Arg("counters", "int32[:]"),
    Arg("rfv", "float32[:]"), Arg("tfv", "float32[:]"), Arg("model_q", "int32[:]"), Arg("model_m", "int32[:]"),
    Arg("model_rfv", "int64[:]"), Arg("model_tfv", "int64[:]"), Arg("model_f", "float32[:]"),
    Arg("scratch", "float32[:]"), Arg("n_threads", "int32"),
    Arg("row_base", "int64[:]"), Arg("cell_base", "int64[:]"), Arg("scale_base", "int64[:]"),
)
#: The Forward matrix kernel's parameters: :data:`JOB_ARGS`, then its outputs.
FWD_ARGS = JOB_ARGS + (
    Arg("out_rows", "float32[:]"), Arg("out_cells", "float32[:]"), Arg("out_flags", "int32[:]"),
    Arg("out_xc", "float32[:]"), Arg("out_nscale", "int32[:]"), Arg("out_scales", "float32[:]"),
)
#: The segmented Forward matrix kernel's parameters: :data:`FWD_ARGS`, then the floats of shared
#: memory a group's two row buffers and exchange area take (sized by the launch's largest model).
SEGMENTED_FWD_ARGS = FWD_ARGS + (Arg("group_floats", "int64"),)
#: The Backward matrix kernel's parameters: :data:`JOB_ARGS`, the Forward matrices' specials
#: (``fwd_rows``, at the same ``row_base``), then its outputs (``out_xn[k]``: row 0's N).
BWD_ARGS = JOB_ARGS + (
    Arg("fwd_rows", "float32[:]"), Arg("out_rows", "float32[:]"), Arg("out_cells", "float32[:]"),
    Arg("out_flags", "int32[:]"), Arg("out_own", "int32[:]"), Arg("out_nscale", "int32[:]"),
    Arg("out_scales", "float32[:]"), Arg("out_xn", "float32[:]"),
)
#: The segmented Backward matrix kernel's parameters: :data:`BWD_ARGS` and ``group_floats``.
SEGMENTED_BWD_ARGS = BWD_ARGS + (Arg("group_floats", "int64"),)


def job_head(e: Emitter) -> None:
    """The job ``k`` the group claimed (its slice, model and special transitions), its model's
    tables, its row cleared, and where its matrix starts (``rb`` specials, ``cb`` cells)."""
    claim_item(e, "claimed")
    e("k = items[claimed]", "L = lengths[k]  # the slice's residues: the matrix's rows after row 0",
      "wb = word_offsets[k]", "pmove = item_xf[4 * k]", "ploop = item_xf[4 * k + 1]",
      "xe_move = item_xf[4 * k + 2]", "xe_loop = item_xf[4 * k + 3]", "m = item_model[k]")
    model_head(e)
    e("rb = row_base[k]", "cb = cell_base[k]")
    with e.block(f"for c in range({SCRATCH_PER_Q} * QQ):  # row 0's cells: 0"):
        e("out_cells[cb + 4 * c + z] = F0")


def store_cells(e: Emitter, i: str) -> None:
    """The thread's lane of row ``i`` (its 3 Q cells: M, D, I) copied to the job's matrix."""
    e(f"o = cb + {i} * {4 * SCRATCH_PER_Q} * QQ + z")
    with e.block(f"for c in range({SCRATCH_PER_Q} * QQ):"):
        e("out_cells[o + 4 * c] = row[c * T + slot]")


def forward_body() -> str:
    """The Forward matrix kernel's body with its rows in global scratch (the lines under its ``def``)."""
    e = Emitter()
    group_head(e)
    with e.block("while True:"):
        job_head(e)
        forward_start(e)
        with e.block("if z == 0:"):
            store_specials(e, "0", "F1")
        forward_rows(e, "z == 0", after_row=lambda e: store_cells(e, "i"))
        with e.block("if z == 0:"):
            e("out_flags[k] = flags", "out_xc[k] = xC", "out_nscale[k] = nscale")
    return indented(e)


def segmented_job_head(e: Emitter, S: int) -> None:
    """The head of a segmented matrix kernel's work loop (inside ``while True:``): the group
    claims job ``k`` (its slice, model and special transitions, as :func:`job_head`), places its
    row buffers and exchange area as the segmented parsers do, and clears row 0 of its matrix."""
    claim_item(e, "claimed", leader="g == 0")
    e("k = items[claimed]", "L = lengths[k]  # the slice's residues: the matrix's rows after row 0",
      "wb = word_offsets[k]", "pmove = item_xf[4 * k]", "ploop = item_xf[4 * k + 1]",
      "xe_move = item_xf[4 * k + 2]", "xe_loop = item_xf[4 * k + 3]", "m = item_model[k]")
    segmented_buffers(e)
    e("rb = row_base[k]", "cb = cell_base[k]")
    with e.block(f"for c in range(g, 12 * QQ, {4 * S}):  # row 0's cells: 0"):
        e("out_cells[cb + c] = F0")


def seg_store_cells(e: Emitter, S: int, i: str) -> None:
    """Row ``i``'s cells, rescaled, copied from the group's row buffer (M, I, D blocks of ``4 Q``
    floats) to the job's matrix (M, D, I: the layout of :class:`hmmgpu.cpu.fwdback.StripedMatrix`)."""
    e("cuda.syncwarp(gmask)", f"o = cb + {i} * 12 * QQ")
    for held, kept in ((0, 0), (1, 2), (2, 1)):
        with e.block(f"for c in range(g, 4 * QQ, {4 * S}):"):
            e(f"out_cells[o + {kept * 4} * QQ + c] = row[cur + {held * 4} * QQ + c]")


def segmented_forward_body(S: int) -> str:
    """The segmented Forward matrix kernel's body: the segmented parser's rows
    (:func:`hmmgpu.gpu.fwdback.source.segmented_body`: a group of 4 S threads a job, its rows i-1
    and i in shared memory) on a job's slice, every row's specials and rescaled cells kept."""
    e = Emitter()
    segmented_head(e, S)
    with e.block("while True:"):
        segmented_job_head(e, S)
        e("prv = first", "cur = second")
        with e.block(f"for c in range(g, 2 * BUF, {4 * S}):"):
            e("row[gb + c] = F0")
        e("cuda.syncwarp(gmask)")
        forward_start(e)
        with e.block("if g == 0:"):
            store_specials(e, "0", "F1")
        seg_forward_rows(e, S, "g == 0", after_row=lambda e, i: seg_store_cells(e, S, i))
        with e.block("if g == 0:"):
            e("out_flags[k] = flags", "out_xc[k] = xC", "out_nscale[k] = nscale")
    return indented(e)


def _keep_row(e: Emitter, i: str) -> None:
    """After Backward's row ``i``: its cells kept, and its scale factor where ``backward_engine``
    takes its logarithm (row L's always, another row's where above 1)."""
    store_cells(e, i)
    with e.block("if " + ("True" if i == "L" else "scale > F1") + ":"):
        with e.block("if z == 0:"):
            e("out_scales[scales_at + nscale] = scale")
        e("nscale += 1")


def segmented_backward_body(S: int) -> str:
    """The segmented Backward matrix kernel's body: the segmented parser's rows
    (:func:`hmmgpu.gpu.fwdback.backward_source.seg_backward_rows`) on a job's slice, every row's
    specials, rescaled cells and kept scale factors stored (as :func:`backward_body` keeps them)."""

    def keep(e: Emitter, i: str) -> None:
        seg_store_cells(e, S, i)
        with e.block("if " + ("True" if i == "L" else "scale > F1") + ":"):
            with e.block("if g == 0:"):
                e("out_scales[scales_at + nscale] = scale")
            e("nscale += 1")

    e = Emitter()
    segmented_head(e, S)
    with e.block("while True:"):
        segmented_job_head(e, S)
        e("cur = first", "nxt = second", "flags = int32(0)", "bad = False", "own = False", "nscale = 0",
          "scales_at = scale_base[k]", "dcv = F0", "dpv = F0", "shifted = F0", "xBv = F0")
        seg_backward_rows(e, S, after_row=keep)
        with e.block("if g == 0:"):
            e("out_flags[k] = flags", "out_own[k] = int32(own)", "out_nscale[k] = nscale", "out_xn[k] = xN")
    return indented(e)


def backward_body() -> str:
    """The Backward matrix kernel's body with its rows in global scratch (the lines under its ``def``)."""
    e = Emitter()
    group_head(e)
    with e.block("while True:"):
        job_head(e)
        e("flags = int32(0)", "bad = False", "own = False", "nscale = 0",
          "scales_at = scale_base[k]  # (the recursion's own names include sb)")
        backward_rows(e, after_row=_keep_row)
        with e.block("if z == 0:"):
            e("out_flags[k] = flags", "out_own[k] = int32(own)", "out_nscale[k] = nscale", "out_xn[k] = xN")
    return indented(e)


@dataclass(frozen=True)
class FwdMatrixSpec:
    """The full-matrix Forward kernel (``p7_Forward``), rows in shared memory
    (``storage="shared"``) or in a global scratch array (``"global"``), as the parsers': in
    shared memory the segmented kernel (a group of ``4 segments`` threads a job,
    :func:`segmented_forward_body`), in global scratch a group of four."""

    storage: str = "shared"
    ftz: bool = False  #: in hmmsearch's float mode (flush-to-zero: hmmgpu.gpu.rounding.float_helpers)
    segments: int = 8

    @property
    def segmented(self) -> bool:
        return self.storage == "shared"

    @property
    def name(self) -> str:
        shape = f"v2_shared_s{self.segments}" if self.segmented else f"v1_{self.storage}"
        return f"fwdback_forward_matrix_{shape}" + ("_ftz" if self.ftz else "")

    @property
    def args(self) -> tuple:
        return SEGMENTED_FWD_ARGS if self.segmented else FWD_ARGS

    def source(self, binding: str) -> str:
        body = segmented_forward_body(self.segments) if self.segmented else forward_body()
        return kernel_module("Full-matrix Forward kernel (HMMER's p7_Forward).", binding, self.args, body,
                             *module_lines(binding, self.ftz))


@dataclass(frozen=True)
class BwdMatrixSpec:
    """The full-matrix Backward kernel (``p7_Backward``), rows in shared memory (the segmented
    kernel, :func:`segmented_backward_body`) or in a global scratch array (a group of four)."""

    storage: str = "shared"
    ftz: bool = False  #: in hmmsearch's float mode (flush-to-zero: hmmgpu.gpu.rounding.float_helpers)
    segments: int = 8

    @property
    def segmented(self) -> bool:
        return self.storage == "shared"

    @property
    def name(self) -> str:
        shape = f"v2_shared_s{self.segments}" if self.segmented else f"v1_{self.storage}"
        return f"fwdback_backward_matrix_{shape}" + ("_ftz" if self.ftz else "")

    @property
    def args(self) -> tuple:
        return SEGMENTED_BWD_ARGS if self.segmented else BWD_ARGS

    def source(self, binding: str) -> str:
        body = segmented_backward_body(self.segments) if self.segmented else backward_body()
        return kernel_module("Full-matrix Backward kernel (HMMER's p7_Backward).", binding, self.args, body,
                             *module_lines(binding, self.ftz),
                             f"OWN_SCALES_AT = {OWN_SCALES_AT!r}")
