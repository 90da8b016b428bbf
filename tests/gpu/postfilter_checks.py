"""hmmgpu's own post-filter on the GPU route (``--backend cuda --postfilter hmmgpu``): the checks.

The GPU process decodes each model's F3 passers (the Forward and Backward parser kernels and the
domain decoding kernel, after the Forward gate: hmmgpu.gpu.cascade), defines them with the GPU's
domain definition stages, and the post-filter stage forms the hits of those definitions, or
starts domain definition from the decodings sent instead (hmmgpu.cpu.own_postfilter). Checked
here: every decoding a model's result carries, and its Forward score, equal the CPU references'
bit for bit (and libhmmer's ``p7_DomainDecoding``), every definition the CPU stages', only F3
passers are decoded or defined; searches on that route, in
this process (pyhmmer's IEEE mode) and through the command line (the GPU process, hmmsearch's
flush-to-zero mode), equal pyhmmer's states, hmmsearch's tables, report and alignment and the
pyhmmer route's tables. Run under numba's CUDA simulator on a few dozen sample targets by
tests/gpu/test_own_postfilter_gpu.py, and on a GPU over the whole sample proteome."""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "pfam_samples"
PROTEOME = SAMPLES / "938293.PRJEB85.HG003687.faa"
OUTPUTS = ("-o", "out.txt", "-A", "out.sto", "--tblout", "out.tblout", "--domtblout", "out.domtblout",
           "--pfamtblout", "out.pfamtblout")


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def sample_models(names) -> list:
    import pyhmmer

    out = []
    for name in names:
        with pyhmmer.plan7.HMMFile(SAMPLES / f"{name}.hmm") as fh:
            out.append(fh.read())
    return out


def sample_targets(hmms, hits: int, misses: int, others: int, max_length: int = 400):
    """A block of proteome targets of at most ``max_length`` residues: for each model its
    ``hits`` shortest targets with a hit and ``misses`` that pass its Viterbi filter but not F3
    (the gate fails them), then ``others`` of the rest."""
    import pyhmmer

    with pyhmmer.easel.SequenceFile(str(PROTEOME), digital=True) as fh:
        proteome = fh.read_block()
    short = [s for s in proteome if len(s) <= max_length]
    chosen: dict = {}
    for hmm in hmms:
        found = {h.name for h in pyhmmer.plan7.Pipeline(hmm.alphabet).search_hmm(hmm, proteome)}
        past_vit = {h.name for h in pyhmmer.plan7.Pipeline(hmm.alphabet, F3=1.0, E=1e9, domE=1e9)
                    .search_hmm(hmm, proteome)} - found
        with_hits = sorted((s for s in short if s.name in found), key=len)[:hits]
        failing = [s for s in short if s.name in past_vit][:misses]
        for seq in with_hits + failing:
            chosen.setdefault(seq.name, seq)
    rest = [s for s in short if s.name not in chosen]
    for seq in rest[::max(1, len(rest) // others)][:others]:
        chosen[seq.name] = seq
    return pyhmmer.easel.DigitalSequenceBlock(proteome.alphabet, list(chosen.values()))


def check_decodings(hmm, db, result, seed: int = 42) -> dict:
    """One model's cascade result with the own post-filter asked for: its decoded targets are F3
    passers of the gate, and each one's Forward score and decoding (status, mocc, btot, etot)
    equal the CPU references' bit for bit (and libhmmer's ``p7_DomainDecoding``'s); the passers
    the GPU process defined (``result.defined``, with the GPU's domain definition stages) are
    F3 passers too, not among the decodings, each one's Forward score and definition equal to
    the CPU references' parsers and domain definition stages' (``seed``: the search's)."""
    from hmmgpu.cpu.fwdback import ForwardTables, backward, length_specials, parse
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.stages.domaindef import domain_decoding
    from hmmgpu.stages.profiles import configured_profile

    from hmmgpu.host import flush_to_zero

    decoded, defined = result.decoded, result.defined
    passers = np.setdiff1d(result.survivors, result.forward.unsure)
    if decoded is None or not np.isin(decoded.indices, passers).all():
        raise AssertionError(f"{hmm.name}: decoded targets that are not F3 passers")
    tables = ForwardTables.from_optimized(configured_profile(hmm).to_optimized())
    n_defined = _check_definitions(hmm, db, tables, passers, decoded, defined, seed) if defined is not None else 0
    with HmmerModel(hmm) as model:
        for k, index in enumerate(decoded.indices.tolist()):
            codes = db.codes(index)
            # a decoding that holds in hmmsearch's float mode only, against the references and
            # libhmmer in that mode (the references under flush-to-zero are hmmsearch's arithmetic)
            with flush_to_zero(bool(decoded.ftz_only[k])):
                forward = parse(tables, codes)
                bck = backward(tables, codes, forward)
                expected = domain_decoding(forward.xmx, bck.xmx, bck.has_own_scales, length_specials(codes.size)[1])
                libhmmer = model.domain_decoding(codes)
            score, got = decoded.target(k)
            if _bits(score) != _bits(forward.score) or got[0] != expected[0]:
                raise AssertionError(f"{hmm.name} target {index}: score/status {score} {got[0]}, "
                                     f"reference {forward.score} {expected[0]}")
            for name, a, b, c in zip(("mocc", "btot", "etot"), got[1:], expected[1:], libhmmer[1:]):
                if not (np.array_equal(_bits(a), _bits(b)) and np.array_equal(_bits(a), _bits(c))):
                    raise AssertionError(f"{hmm.name} target {index}: {name} differs from the reference")
    n_decoded = len(decoded) + n_defined
    ftz_defined = int(defined.ftz_only.sum()) if defined is not None else 0
    return dict(passers=int(passers.size), decoded=n_decoded, defined=n_defined,
                ftz_only=int(decoded.ftz_only.sum()) + ftz_defined, ftz_defined=ftz_defined,
                left_to_host=int(passers.size) - n_decoded,
                bytes=decoded.nbytes + (defined.nbytes if defined is not None else 0))


def _check_definitions(hmm, db, tables, passers, decoded, defined, seed: int) -> int:
    """:func:`check_decodings`' definitions part: how many the GPU process sent, each checked."""
    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.cpu.fwdback import backward, parse
    from hmmgpu.host import flush_to_zero
    from hmmgpu.stages.domaindef import define_domains
    from hmmgpu.stages.forward import HOST

    if not np.isin(defined.indices, passers).all() or np.isin(defined.indices, decoded.indices).any():
        raise AssertionError(f"{hmm.name}: defined targets that are not F3 passers, or decoded too")
    stages = CpuDomainStages(tables, seed=seed)
    for k, index in enumerate(defined.indices.tolist()):
        codes = db.codes(index)
        ftz = bool(defined.ftz_only[k])   # defined from a decoding in hmmsearch's mode: in that mode
        with flush_to_zero(ftz):
            forward = parse(tables, codes)
            bck = backward(tables, codes, forward)
            want = define_domains(stages, codes, forward.xmx, bck.xmx, bck.has_own_scales)
        score, got = defined.target(k)
        if (want.flags & HOST and not ftz) or _bits(score) != _bits(forward.score):
            raise AssertionError(f"{hmm.name} target {index}: sent, but score {score} (reference {forward.score}) "
                                 f"or the reference's flags {want.flags}")
        same = [getattr(got, n) == getattr(want, n) for n in ("nregions", "nclustered", "noverlaps", "nenvelopes")]
        same += [_bits(got.nexpected) == _bits(want.nexpected), _bits(got.n2sc_sum) == _bits(want.n2sc_sum),
                 len(got.domains) == len(want.domains)]
        for a, b in zip(got.domains, want.domains):
            same += [(a.ienv, a.jenv, a.iali, a.jali) == (b.ienv, b.jenv, b.iali, b.jali)]
            same += [_bits(getattr(a, n)) == _bits(getattr(b, n)) for n in ("envsc", "domcorrection", "oasc")]
            same += [np.array_equal(getattr(a.trace, n), getattr(b.trace, n)) for n in ("st", "k", "i")]
            same += [np.array_equal(_bits(a.trace.pp), _bits(b.trace.pp))]
        if not all(same):
            raise AssertionError(f"{hmm.name} target {index}: the GPU process's definition differs from the "
                                 "CPU stages'")
    return len(defined)


def check_engine(backend, db, hmms, declined: bool = False, **options) -> list:
    """The search engine on ``backend`` (in this process, pyhmmer's IEEE mode) with hmmgpu's own
    post-filter: each model's decodings (:func:`check_decodings`, from the cascade results the
    engine got), and its hits equal pyhmmer's search's (byte for byte, in order; its counts and
    counters), the stage having used the GPU's decodings. With ``declined`` (the GPU process
    declines every gate batch: ``tuning.DEFINE_BACKLOG_PASSERS = 0``) the same hits, the GPU
    having decoded and defined none, every F3 passer counted declined and sent to pyhmmer's
    pipeline. Rows: per model, then the engine's."""
    import pyhmmer

    from hmmgpu.options import SearchOptions
    from hmmgpu.search.engine import SearchEngine
    from tests.helpers import PIPELINE_KEYS
    from tests.stages.test_hits import normalized

    opts = SearchOptions.from_kwargs(backend="cuda", postfilter="hmmgpu", **options)
    engine = SearchEngine(db, opts, backend, model_lengths=[hmm.M for hmm in hmms])
    tickets = []
    submit = backend.submit

    def recorded(profile, submitted):
        tickets.append(submit(profile, submitted))
        return tickets[-1]

    backend.submit = recorded
    try:
        results = list(engine.search(hmms))
    finally:
        del backend.submit
    rows = [] if declined else [(f"decodings {hmm.name}", check_decodings(hmm, db, ticket.result(), opts.seed))
                                for hmm, ticket in zip(hmms, tickets, strict=True)]
    hits = 0
    for result, hmm in zip(results, hmms, strict=True):
        ours = result.hits.__getstate__()
        ref = pyhmmer.plan7.Pipeline(hmm.alphabet, **opts.pipeline_kwargs()).search_hmm(hmm, db.block()).__getstate__()
        same = [normalized(h) for h in ours["unsrt"]] == [normalized(h) for h in ref["unsrt"]] and all(
            ours[key] == ref[key] for key in ("hit", "N", "nreported", "nincluded")) and all(
            ours["pipeline"][key] == ref["pipeline"][key] for key in PIPELINE_KEYS)
        if not same:
            raise AssertionError(f"{hmm.name}: the engine's hits or counters differ from pyhmmer's")
        hits += ref["N"]
    p = engine.stats.postfilter
    if declined:
        counts = backend.gpu.decoding_counts
        passers = sum(int(np.setdiff1d(t.result().survivors, t.result().forward.unsure).size) for t in tickets)
        reclaim = engine.stats.reclaim
        if reclaim["batches"]:   # taken back after the filters: decoded and defined in the GPU's process then
            if not 0 < reclaim["passers"] == counts["reclaimed"] <= passers or counts["declined"] != passers \
                    or not 0 < p.get("defined_on_gpu", 0) <= reclaim["passers"] \
                    or p["host"] < passers - p["defined_on_gpu"]:
                raise AssertionError(f"the passers taken back were not defined as counted: {p} {counts} {reclaim}")
            return rows + [("reclaimed", dict(hits=hits, passers=passers, reclaimed=reclaim["passers"],
                                              defined=p["defined_on_gpu"],
                                              decoded=p["decoded_on_gpu"], host=p["host"], tasks=reclaim["tasks"],
                                              line=engine.stats.postfilter_line()))]
        if p.get("decoded_on_gpu") or p.get("defined_on_gpu") or counts["declined"] != passers or \
                p["host"] < passers or not passers:
            raise AssertionError(f"declined passers decoded, defined or not sent to pyhmmer: {p} {counts}")
        return rows + [("declined", dict(hits=hits, passers=passers, host=p["host"], declined=counts["declined"]))]
    if not p.get("decoded_on_gpu") or not p.get("defined_on_gpu"):
        raise AssertionError(f"the post-filter used no decoding or no definition of the GPU: {p}")
    return rows + [("engine", dict(hits=hits, **{k: p[k] for k in ("passed", "host", "failed", "decoded_on_gpu",
                                                                  "defined_on_gpu")})),
                   ("definition seconds", backend.details()["definition_seconds"]),
                   ("definition timeline", _timeline(backend.details()["definition_timeline"])),
                   ("host code", backend.details()["host_code"])]


def _timeline(entries: list) -> dict:
    """The backend's ``definition_timeline`` in brief: its entries' widths, their passers, and
    their definitions' seconds summed by step (:data:`hmmgpu.gpu.cascade.TIMELINE_STEPS`)."""
    from hmmgpu.gpu.cascade import TIMELINE_STEPS

    return dict(widths=sorted({len(e) for e in entries}), passers=sum(e[4] for e in entries),
                **{name: round(sum(e[5 + n] for e in entries), 3) for n, name in enumerate(TIMELINE_STEPS)})


def _rows(path) -> list:
    return [line for line in path.read_bytes().split(b"\n") if not line.startswith(b"#")]


def check_command_line(hmms, block, cpus: int = 2, route: str = "hmmer") -> dict:
    """``hmmgpu search --backend cuda --postfilter hmmgpu`` (the GPU process; hmmsearch's float
    mode) on ``hmms`` x ``block`` written to files: its three tables, report and -A alignment
    equal hmmsearch's (when installed), its tables the pyhmmer route's (``--backend`` ``route``:
    pyhmmer's whole pipeline, or the GPU's filters and pyhmmer's post-filter), and its
    statistics say the GPU's decodings were used."""
    import re

    from hmmgpu.cli import main
    from tests.report.test_report import assert_same_report

    hmmsearch = shutil.which("hmmsearch")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fasta, hmmfile = tmp / "db.fa", tmp / "m.hmm"
        with open(fasta, "wb") as fh:
            for seq in block:
                seq.textize().write(fh)
        with open(hmmfile, "wb") as fh:
            for hmm in hmms:
                hmm.write(fh)
        runs = {}
        for name, args in (("hmmgpu", ["--backend", "cuda", "--postfilter", "hmmgpu"]),
                           ("route", ["--backend", route])):
            folder = tmp / name
            folder.mkdir()
            cwd = os.getcwd()
            os.chdir(folder)
            try:
                with contextlib.redirect_stderr(io.StringIO()) as err:
                    code = main(["search", "--cpu", str(cpus), *OUTPUTS, *args, str(hmmfile), str(fasta)])
            finally:
                os.chdir(cwd)
            if code != 0:
                raise AssertionError(f"{name}: exit {code}: {err.getvalue()[-2000:]}")
            runs[name] = (folder, err.getvalue())
        ours, said = runs["hmmgpu"]
        decoded = re.search(r"(\d+) F3 passers' Forward and Backward parsers and domain decoding done on the GPU",
                            said)
        defined = re.search(r"(\d+) passers defined on the GPU", said)
        if decoded is None or defined is None:
            raise AssertionError(f"the command line used no decoding or no definition of the GPU:\n{said[-3000:]}")
        for kind in ("tblout", "domtblout", "pfamtblout"):
            if _rows(ours / f"out.{kind}") != _rows(runs["route"][0] / f"out.{kind}"):
                raise AssertionError(f"{kind} differs from the pyhmmer route's")
        n_rows = len(_rows(ours / "out.domtblout")) - 1
        if hmmsearch is not None:
            ref = tmp / "hmmsearch"
            ref.mkdir()
            subprocess.run([hmmsearch, "--cpu", str(cpus), *OUTPUTS, str(hmmfile), str(fasta)], check=True, cwd=ref,
                           capture_output=True)
            for kind in ("tblout", "domtblout", "pfamtblout"):
                if _rows(ours / f"out.{kind}") != _rows(ref / f"out.{kind}"):
                    raise AssertionError(f"{kind} differs from hmmsearch's")
            assert_same_report((ours / "out.txt").read_bytes(), (ref / "out.txt").read_bytes())
            author = re.compile(rb"^#=GF AU .*$", re.M)
            if author.sub(b"", (ours / "out.sto").read_bytes()) != author.sub(b"", (ref / "out.sto").read_bytes()):
                raise AssertionError("the -A alignment differs from hmmsearch's")
        return dict(domain_rows=n_rows, decoded_on_gpu=int(decoded.group(1)), defined_on_gpu=int(defined.group(1)),
                    hmmsearch=hmmsearch is not None)


def simulator_own_postfilter_checks():
    """Under the simulator: KR against nine proteome targets (its three shortest hits, two
    Viterbi-filter survivors that fail F3, four others: nine, not the dozen before, since the
    passers' domain definition now runs in the simulated GPU's kernels too)."""
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.backend import CudaBackend

    import time

    clock = time.perf_counter()
    hmms = sample_models(["KR"])
    block = sample_targets(hmms, hits=3, misses=2, others=4, max_length=260)
    db = SequenceDB.from_block(block)
    out = [("targets", len(block))]
    backend = CudaBackend(db)
    try:
        out += check_engine(backend, db, hmms, cpus=2)
    finally:
        backend.close()
    out.append(("engine seconds", round(time.perf_counter() - clock, 1)))
    return out


def simulator_declined_checks():
    """Under the simulator: :func:`simulator_own_postfilter_checks`' search with the GPU
    process's definitions' backlog at 0 (``tuning.DEFINE_BACKLOG_PASSERS``): every gate batch
    declined, its passers on pyhmmer's pipeline, the hits pyhmmer's."""
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.gpu.runtime import tuning

    hmms = sample_models(["KR"])
    db = SequenceDB.from_block(sample_targets(hmms, hits=3, misses=2, others=4, max_length=260))
    tuning.DEFINE_BACKLOG_PASSERS = 0
    backend = CudaBackend(db)
    try:
        return check_engine(backend, db, hmms, declined=True, cpus=2)
    finally:
        backend.close()


def simulator_reclaim_checks():
    """Under the simulator: :func:`simulator_declined_checks`' search, every gate batch declined,
    with the GPU process taking every queued task back once the filters are done
    (``engine.RECLAIM_MARGIN`` huge: a share of 1; ``RECLAIM_MIN_PASSERS`` 1): the declined passers of every task
    still queued then decoded and defined there after all, the hits pyhmmer's. Each target is a
    task of its own (``TASK_SECONDS`` tiny), and the one worker thread holds its first task until
    the GPU process has answered, so that tasks are still queued when the filters are done (on a
    real run the workers are behind the filters; here they would take every task at once)."""
    import threading

    from hmmgpu.cpu.own_postfilter import OwnPostFilter
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.gpu.runtime import tuning
    from hmmgpu.search import engine
    from hmmgpu.stages import postfilter

    hmms = sample_models(["KR"])
    db = SequenceDB.from_block(sample_targets(hmms, hits=3, misses=2, others=4, max_length=260))
    tuning.DEFINE_BACKLOG_PASSERS = 0
    engine.RECLAIM_MARGIN, engine.RECLAIM_MIN_PASSERS = 1e9, 1
    postfilter.TASK_SECONDS = 1e-9
    answered = threading.Event()
    run, define = OwnPostFilter.run, CudaBackend.define_passers

    def held_run(self, task, alone=False):
        answered.wait(600)
        return run(self, task, alone)

    def signalled_define(self, items):
        try:
            return define(self, items)
        finally:
            answered.set()

    OwnPostFilter.run, CudaBackend.define_passers = held_run, signalled_define
    backend = CudaBackend(db)
    try:
        return check_engine(backend, db, hmms, declined=True, cpus=1)
    finally:
        backend.close()
        OwnPostFilter.run, CudaBackend.define_passers = run, define


def simulator_decoding_batch_checks():
    """Under the simulator: three sampled models' gates in one batch (F3 = 1: every decided
    Viterbi-filter survivor passes) with the own post-filter asked for, a fourth without: the
    three share one decoding step, each one's decodings are its own passers' and equal the
    references' (:func:`check_decodings`), and the fourth gets none. With ``--seed 0`` (domain
    definition's random numbers arbitrary: the post-filter leaves such tasks to pyhmmer) the GPU
    process defines none of them (the search's definitions: :func:`simulator_own_postfilter_checks`)."""
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.options import SearchOptions
    from tests.gpu.kernel_checks import vit_case

    cases = [vit_case(M, seed, 4, 14, long_cases=False) for M, seed in ((24, 11), (40, 3), (17, 5))]
    db = cases[0][2]
    own = SearchOptions.from_kwargs(F1=1.0, F2=1.0, F3=1.0, postfilter="hmmgpu", seed=0)
    plain = SearchOptions.from_kwargs(F1=1.0, F2=1.0, F3=1.0)
    backend = CudaBackend(db)
    try:
        asked = [(hmm, own) for hmm, _, _ in cases] + [(cases[0][0], plain)]
        gated = [backend.gpu.submit(backend.prepare(hmm), options).filtered() for hmm, options in asked]
        backend.flush_gates()
        if len({id(g.batch) for g in gated}) != 1 or len({id(g.step) for g in gated[:3]}) != 1 or \
                gated[0].step is None or gated[3].step is not None:
            raise AssertionError("the gates did not share one batch, or the decodings one step")
        out = [(f"batched M{hmm.M}", check_decodings(hmm, db, g.result())) for (hmm, _), g in zip(asked, gated)
               if g.decode]
        if gated[3].result().decoded is not None:
            raise AssertionError("a model without the own post-filter got decodings")
        if any(g.result().defined is not None for g in gated):
            raise AssertionError("definitions made with --seed 0")
        return out + [("decoding counts", dict(backend.gpu.decoding_counts))]
    finally:
        backend.close()


def gpu_own_postfilter_checks():
    """On a GPU: the four sample models against the whole sample proteome (2,100 targets)."""
    import pyhmmer

    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.backend import CudaBackend

    hmms = sample_models(["PF02826", "LuxC", "Thioesterase", "KR"])
    with pyhmmer.easel.SequenceFile(str(PROTEOME), digital=True) as fh:
        block = fh.read_block()
    db = SequenceDB.from_block(block)
    backend = CudaBackend(db)
    try:
        out = check_engine(backend, db, hmms, cpus=4)
    finally:
        backend.close()
    out.append(("command line", check_command_line(hmms, block, cpus=4, route="cuda")))
    return out


def gpu_reclaim_command_line_checks():
    """On a GPU: ``hmmgpu search --backend cuda --postfilter hmmgpu`` (the GPU process) on the four
    sample models against the sample proteome, the GPU process declining every gate batch and the
    engine taking every queued task back after the filters (set in both processes by a
    ``sitecustomize`` module), tasks of one target each: its three tables equal hmmsearch's (or,
    without hmmsearch, the pyhmmer route's), and its statistics say the passers were taken back and
    defined in the GPU process."""
    import re
    import sys

    hmmsearch = shutil.which("hmmsearch")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "sitecustomize.py").write_text(
            "from hmmgpu.gpu.runtime import tuning\nfrom hmmgpu.search import engine\n"
            "from hmmgpu.stages import postfilter\ntuning.DEFINE_BACKLOG_PASSERS = 0\n"
            "engine.RECLAIM_MARGIN, engine.RECLAIM_MIN_PASSERS = 1e9, 1\npostfilter.TASK_SECONDS = 1e-4\n")
        hmmfile = tmp / "m.hmm"
        with open(hmmfile, "wb") as fh:
            for hmm in sample_models(["PF02826", "LuxC", "Thioesterase", "KR"]):
                hmm.write(fh)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        runs = {}
        for name, command in (("hmmgpu", [sys.executable, "-m", "hmmgpu", "search", "--backend", "cuda",
                                          "--postfilter", "hmmgpu"]),
                              ("reference", [hmmsearch] if hmmsearch else [sys.executable, "-m", "hmmgpu", "search",
                                                                         "--backend", "hmmer"])):
            folder = tmp / name
            folder.mkdir()
            done = subprocess.run([*command, "--cpu", "4", *OUTPUTS, str(hmmfile), str(PROTEOME)], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise AssertionError(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}")
            runs[name] = (folder, done.stderr)
        for kind in ("tblout", "domtblout", "pfamtblout"):
            if _rows(runs["hmmgpu"][0] / f"out.{kind}") != _rows(runs["reference"][0] / f"out.{kind}"):
                raise AssertionError(f"{kind} differs from the reference's")
        said = runs["hmmgpu"][1]
        taken = re.search(r"(\d+) F3 passers of (\d+) queued tasks taken back by the GPU process", said)
        defined = re.search(r"(\d+) passers defined on the GPU", said)
        if taken is None or defined is None or not 0 < int(defined.group(1)) <= int(taken.group(1)):
            raise AssertionError(f"no passers taken back and defined:\n{said[-3000:]}")
        return dict(reclaimed=int(taken.group(1)), tasks=int(taken.group(2)), defined=int(defined.group(1)),
                    domain_rows=len(_rows(runs["hmmgpu"][0] / "out.domtblout")) - 1, hmmsearch=hmmsearch is not None)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    from tests.helpers import run_named_checks

    run_named_checks(globals(), sys.argv[1:])
