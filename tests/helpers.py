"""Shared test inputs: sample files, adversarial targets, HMMER reference scores."""
from __future__ import annotations

import io
import os
import pathlib

import numpy as np
from pyhmmer.easel import Alphabet, DigitalSequence, DigitalSequenceBlock, Randomness
from pyhmmer.plan7 import HMM, HMMFile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "pfam_samples"
PROTEOME = SAMPLES / "938293.PRJEB85.HG003687.faa"
MODEL_NAMES = ["PF02826", "LuxC", "Thioesterase", "KR"]
SHARED = pathlib.Path(os.environ.get("HMMGPU_SHARED_DATA", ROOT.parent / "shared" / "data"))
AMINO = Alphabet.amino()


def sample_hmm(name: str):
    with HMMFile(SAMPLES / f"{name}.hmm") as f:
        return f.read()


def sampled_hmm(M: int, seed: int):
    """A random model, round-tripped through the HMMER3 text format (as HMMER's own reader sees it)."""
    buf = io.BytesIO()
    HMM.sample(AMINO, M, Randomness(seed)).write(buf)
    buf.seek(0)
    with HMMFile(buf) as f:
        return f.read()


def bits(a) -> np.ndarray:
    """The float32 bits of ``a`` (uint32), for bit-for-bit comparisons."""
    return np.asarray(a, np.float32).view(np.uint32)


def zero_tiny(rows) -> np.ndarray:
    """``rows`` with every subnormal (or FLT_MIN) entry set to 0: what flush-to-zero stores."""
    out = np.array(rows, np.float32)
    out[(out > 0) & (out <= np.float32(2.0 ** -126))] = 0
    return out


def consensus_codes(hmm) -> np.ndarray:
    """The most probable residue of every match state."""
    return np.asarray(hmm.match_emissions, dtype=np.float32)[1:].argmax(axis=1).astype(np.uint8)


def adversarial_results(name: str, compare) -> dict:
    """Every target of :func:`adversarial_block` for the sample model ``name`` (or
    ``"sampled"``: a generated model of 30 nodes) through ``compare(model, tables, codes)``
    (a libhmmer ``HmmerModel`` and its Forward tables), by target name."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.stages.forward import ForwardTables

    hmm = sample_hmm(name) if name != "sampled" else sampled_hmm(30, 4)
    with HmmerModel(hmm) as model:
        tables = ForwardTables.from_hmmer(model)
        return {str(seq.name): compare(model, tables, np.asarray(seq.sequence, np.uint8))
                for seq in adversarial_block(hmm)}


def adversarial_block(hmm, seed: int = 7) -> DigitalSequenceBlock:
    """Targets that exercise every corner of the filters (docs/algorithms.md §13)."""
    rng = np.random.default_rng(seed)
    cons = consensus_codes(hmm)
    seqs = {
        "len1_A": np.array([0]),
        "len1_W": np.array([18]),
        "stop_only": np.full(5, 27),
        "stop_one": np.array([27]),
        "all_X": np.full(300, 26),
        "degenerate_BZJUO": np.tile([21, 22, 23, 24, 25], 40),
        "gaps_and_missing": np.array([0, 20, 3, 28, 5, 20, 7] * 10),
        "consensus": cons,
        "consensus_x3": np.tile(cons, 3),  # strong homolog: overflows the byte range
        "consensus_in_noise": np.concatenate([rng.integers(0, 20, 500), cons, rng.integers(0, 20, 500)]),
        "random_20000": rng.integers(0, 20, 20000),
        "random_all_codes": rng.integers(0, 29, 2000),
        "poly_consensus_residue": np.full(400, int(cons[0])),
    }
    return DigitalSequenceBlock(AMINO, [
        DigitalSequence(AMINO, name=name.encode(), sequence=np.asarray(codes, dtype=np.uint8))
        for name, codes in seqs.items()
    ])


def hits_table(hits, fmt: str = "targets") -> bytes:
    """A pyhmmer ``TopHits`` written as one of HMMER's tables (``targets``, ``domains``,
    ``pfam``), without its header: the bytes to compare with a reference's."""
    buf = io.BytesIO()
    hits.write(buf, format=fmt, header=False)
    return buf.getvalue()


#: hmmsearch's pipeline counters; with the Z and domZ a run's ``TopHits`` carry.
COUNTER_KEYS = ("nseqs", "nres", "n_past_msv", "n_past_bias", "n_past_vit", "n_past_fwd")
PIPELINE_KEYS = COUNTER_KEYS + ("Z", "domZ", "Z_setby", "domZ_setby")


def assert_same_pipeline(ours, ref, keys=PIPELINE_KEYS) -> None:
    """Two runs' pipeline ``keys`` are equal (each run a ``TopHits``, or its state's
    ``pipeline`` dict)."""
    po, pr = (p if isinstance(p, dict) else p.__getstate__()["pipeline"] for p in (ours, ref))
    for key in keys:
        assert po[key] == pr[key], key


def forward_pvalues(hmm, db, indices, bias_filter: bool = True) -> np.ndarray:
    """``p7_Pipeline``'s Forward filter P-value of each target ``indices`` of ``db``, from
    HMMER's own functions (libhmmer: ``p7_ForwardParser``, and ``p7_bg_FilterScore`` or, without
    the bias filter, ``p7_bg_NullOne``) and its arithmetic: ``seq_score = (fwdsc - filtersc) /
    eslCONST_LOG2`` in a float, ``esl_exp_surv`` in double. NaN where Forward fails (eslERANGE)."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.stages import stats

    out = np.full(len(indices), np.nan)
    with HmmerModel(hmm) as model:
        tau, lam = model.evalue_parameters()[4:6]
        for j, t in enumerate(np.asarray(indices).tolist()):
            codes = db.codes(int(t))
            status, fwdsc, _, _ = model.forward_parser(codes)
            if status != 0:
                continue
            filtersc = model.bias_filter_score(codes) if bias_filter else model.null_score(codes)
            out[j] = stats.exp_surv(stats.bits(float(fwdsc), float(filtersc)), tau, lam)
    return out


def narrow_f3(pvalues) -> list:
    """F3 thresholds that fall between the Forward P-values of two targets, as narrowly as a
    double allows: each the P-value of one target (which passes, P <= F3), and the next double
    below it (which fails), for the smallest P-value above 1e-12 (others pass) and for
    the middle one of those above it."""
    p = np.unique(np.asarray(pvalues, np.float64)[np.isfinite(pvalues)])
    p = p[(p > 1e-12) & (p < 1.0)]
    if p.size < 2:
        return []
    out = []
    for value in dict.fromkeys((float(p[0]), float(p[p.size // 2]))):
        out += [value, float(np.nextafter(value, 0.0))]
    return out


def run_named_checks(namespace: dict, names) -> None:
    """The entry point of a simulator check script (run in a subprocess with the CUDA
    simulator on): each named check function's rows printed, then the line the tests expect."""
    import time

    t = time.time()
    for name in names:
        for row in namespace[name]():
            print(*row, flush=True)
    print(f"simulator checks OK in {time.time() - t:.1f}s")


def clustered_regions(model, codes):
    """The clustered regions ``(i, j)`` of a target, from libhmmer's parser rows."""
    from hmmgpu.stages.domaindef import domain_decoding, is_multidomain_region, region_scan
    from hmmgpu.stages.forward import length_specials

    _, _, fwd_rows, _ = model.forward_parser(codes)
    _, _, bck_rows, _, own = model.backward_parser(codes)
    _, mocc, btot, etot = domain_decoding(fwd_rows, bck_rows, own, length_specials(codes.size)[1])
    return [(i, j) for i, j in region_scan(mocc, btot, etot) if is_multidomain_region(btot, etot, i, j)]


def assert_definition_equal(where, mine, theirs):
    """hmmgpu's :class:`~hmmgpu.stages.domaindef.DomainDefinition` ``mine`` equals libhmmer's
    (``HmmerModel.domain_definition``) bit for bit: status, counters, nexpected, every n2sc
    value and each dcl entry."""
    assert mine.status == theirs["status"], where
    for key in ("nregions", "nclustered", "noverlaps", "nenvelopes"):
        assert getattr(mine, key) == theirs[key], (where, key)
    assert bits(mine.nexpected) == bits(theirs["nexpected"]), where
    assert bits(mine.n2sc).tobytes() == bits(theirs["n2sc"]).tobytes(), where
    assert mine.ndom == len(theirs["domains"]), where
    for d, ref in zip(mine.domains, theirs["domains"]):
        assert (d.ienv, d.jenv, d.iali, d.jali) == (ref["ienv"], ref["jenv"], ref["iali"], ref["jali"]), where
        for key in ("envsc", "domcorrection", "oasc"):
            assert bits(getattr(d, key)) == bits(ref[key]), (where, key)


def assert_rounded_ptx(kernel, *ops) -> None:
    """A compiled kernel's PTX holds each of ``ops`` (its explicitly rounded float operations,
    ``"mul.rn.f32"`` say) and no fused multiply-add or flush-to-zero instruction: numba-cuda
    contracts ``a*b+c`` into an FMA unless every product is rounded explicitly, which would
    break bit-exactness with HMMER (../shared/docs/gpu-notes.md)."""
    ptx = kernel.inspect_asm()
    ptx = "\n".join(ptx.values()) if isinstance(ptx, dict) else ptx
    missing = [op for op in ops if op not in ptx]
    assert not missing, f"rounded operations not in the PTX: {missing}"
    assert "fma." not in ptx and ".ftz" not in ptx


def run_simulated(script, *checks, cache_dir, extra_paths=()) -> str:
    """The output of a check script (``script``, a path) run on the named check functions under
    numba's CUDA simulator, in a subprocess (the simulator is chosen at numba's import), with
    this checkout (and ``extra_paths``) importable and hmmgpu's kernel cache in ``cache_dir``;
    it must exit 0 and print the line :func:`run_named_checks` ends with."""
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", HMMGPU_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, extra_paths), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, str(script), *checks], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "simulator checks OK" in p.stdout
    return p.stdout


def simulated_rows(stdout: str) -> dict:
    """The ``name {report}`` lines of a check script's output, as {name: report dict}."""
    return {line.split(" {")[0]: eval(line[line.index("{"):]) for line in stdout.splitlines() if " {" in line}


def kill_on_start(monkeypatch, process_class) -> None:
    """Make every worker process of ``process_class`` (a ``_Process`` whose ``process`` is the
    child) die as soon as it has started, as the kernel's out-of-memory killer would kill it."""
    started = process_class.__init__

    def killed(self, *args):
        started(self, *args)
        self.process.kill()
        self.process.wait()

    monkeypatch.setattr(process_class, "__init__", killed)


def failed_search(tmp_path, capsys, *args) -> tuple:
    """``hmmgpu search --tblout TABLE -o /dev/null *args`` over a table already there, expected
    to fail: (exit status, standard error's lines), the error having left no traceback and the
    table as it was."""
    from hmmgpu.cli import main

    table = tmp_path / "kept.tbl"
    table.write_text("an older table\n")
    code = main(["search", "--tblout", str(table), "-o", "/dev/null", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert table.read_text() == "an older table\n"
    return code, err
