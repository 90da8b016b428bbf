#!/usr/bin/env bash
# One call on the lent GPU machine: set up the Python environment there, then run the named phases.
#
#   bash benchmarks/gpu_session.sh PHASE [PHASE...]     (from the repository root; results go to $OUT)
#
# Needs, carried with the call: .bench/commit and .bench/digest (`python3 benchmarks/provenance.py .bench`),
# .whl/ (pyhmmer, hmmer, pyopal, scoring-matrices wheels for
# cp312), .bench/data/ (the shared data: seqs/, pfam/, pfam_db/, cudampf/) and, for the sw
# phase, .bench/cudasw4/. The machine's numpy is 2.5, whose removal of np.row_stack breaks
# numba-cuda 0.30.4 at its first compile: a sitecustomize puts the alias back for this run
# when numpy is first imported (hmmgpu itself pins numpy < 2.5).
#
# Phases: check (stops the session on failure), smoke, probe, hostprofile, startup, smalljob, warmup, tests, audit, vit,
# engine[:workloads], pieces, scaling, sw, swtests, bench:SCRIPT (an ad hoc script of .bench, sourced).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
mkdir -p /tmp/shim
cat >/tmp/shim/sitecustomize.py <<'EOF'
# Put numpy.row_stack back when numpy is first imported, not here: importing numpy at start-up
# would cost every Python process of the benchmarks its import (0.26 s on the GPU machine),
# before hmmgpu's command line sets OPENBLAS_NUM_THREADS=1 for itself.
import importlib.abc
import importlib.machinery
import sys


class _RowStack(importlib.abc.MetaPathFinder):
    """Every spec found for numpy (a probe such as importlib.util.find_spec asks too) runs the
    module and then adds the alias; the finder leaves once numpy has been imported."""

    def find_spec(self, name, path, target=None):
        if name != "numpy":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                if not hasattr(module, "row_stack"):
                    module.row_stack = module.vstack
                if self in sys.meta_path:
                    sys.meta_path.remove(self)

            spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _RowStack())
EOF
chmod +x /tmp/site/hmmer/data/bin/* 2>/dev/null
export PYTHONPATH=/tmp/shim:/tmp/site:$PWD
export PATH=/tmp/site/bin:/tmp/site/hmmer/data/bin:$PATH
export HMMGPU_SHARED_DATA=$PWD/.bench/data
# The commit and code digest of this tree, written by `python3 benchmarks/provenance.py .bench` before the
# call (this copy has no git metadata); a result whose code does not match the digest says "-stale".
export HMMGPU_COMMIT=$(cat .bench/commit 2>/dev/null || echo unknown)
[ -f .bench/digest ] && export HMMGPU_CODE_DIGEST=$(cat .bench/digest)
export NUMBA_CACHE_DIR=/tmp/numba-cache
# The machine sets PYTHONDONTWRITEBYTECODE=1 and its Python environment holds no compiled bytecode, so
# each Python process there compiles every module it imports from source (measured: numpy 0.2 s, numba.cuda
# 0.35 s more per process). An installation made by pip has the bytecode (pip compiles it; Python caches
# what is missing at first import), so every Python tool of a session runs with Python's default caching,
# under /tmp/pycache, filled once before any timing. BENCH_BYTECODE=machine keeps the machine's setting.
if [ "${BENCH_BYTECODE:-cached}" = cached ]; then
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX=/tmp/pycache
  python3 -c "import numpy, numba.cuda, pyhmmer, hmmgpu.cli, hmmgpu.search.engine, hmmgpu.gpu.process, hmmgpu.gpu.cascade, hmmgpu.sw.api" \
      >/dev/null 2>&1
fi
DATA=$PWD/.bench/data
T=$(nproc)
log() { echo "=== $(date +%T) $*"; }
unpack() { python3 -c "import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$1" "$2"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"

for phase in "$@"; do
  case "$phase" in
    check)
      log check: the sample search on the GPU, tables against hmmsearch
      python3 -m hmmgpu search --backend cuda --tblout /tmp/check.tbl -o /dev/null pfam_samples/samples.hmm \
          pfam_samples/938293.PRJEB85.HG003687.faa || { echo "check failed"; exit 1; }
      hmmsearch --tblout /tmp/check.ref.tbl -o /dev/null pfam_samples/samples.hmm pfam_samples/938293.PRJEB85.HG003687.faa
      python3 -c "
import sys
a, b = ([l.split() for l in open(p) if not l.startswith('#')] for p in ('/tmp/check.tbl', '/tmp/check.ref.tbl'))
print('check: rows equal hmmsearch:', a == b, len(a))
sys.exit(0 if a == b and a else 1)" || exit 1 ;;
    smoke)
      log smoke: 60 models x 29 M residues, cold then warm, and hmmsearch on the same models
      python3 - <<'EOF'
import gzip
t = gzip.open(".bench/data/pfam_db/pfam35_sample600.hmm.gz", "rb").read().split(b"//\n")
open("/tmp/m60.hmm", "wb").write(b"//\n".join(t[:60]) + b"//\n")
EOF
      unpack "$DATA/seqs/public_proteins.fa.gz" /tmp/proteins.fa
      ( time python3 -m hmmgpu search --backend cuda --cpu "$T" -o /dev/null --tblout "$OUT/m60.tbl" /tmp/m60.hmm /tmp/proteins.fa ) 2>&1 | tail -9
      ( time python3 -m hmmgpu search --backend cuda --cpu "$T" -o /dev/null --tblout "$OUT/m60.tbl" /tmp/m60.hmm /tmp/proteins.fa ) 2>&1 | tail -9
      ( time hmmsearch --cpu "$T" -o /dev/null --tblout /tmp/m60.ref.tbl /tmp/m60.hmm /tmp/proteins.fa ) 2>&1 | tail -3
      python3 - "$OUT/m60.tbl" /tmp/m60.ref.tbl <<'EOF'
import sys
a, b = ([l.split() for l in open(p) if not l.startswith("#")] for p in sys.argv[1:])
print("rows equal hmmsearch:", a == b, len(a), len(b))
EOF
      ;;
    probe)
      log engine probe: 600 models x 29 M residues, engine settings in one process
      unpack "$DATA/pfam_db/pfam35_sample600.hmm.gz" /tmp/pfam600.hmm
      unpack "$DATA/seqs/public_proteins.fa.gz" /tmp/proteins.fa
      P="python3 benchmarks/engine_probe.py /tmp/pfam600.hmm /tmp/proteins.fa --cpu $T"
      timeout 300 $P --backend cuda ${PROBE_CUDA:---config task=0.1 --config task=0.1 --config task=0.2} 2>&1 | grep -v "^# hmmgpu 0"
      timeout 200 $P --backend hmmer ${PROBE_HMMER:---config pipeline_task=0.25 --config pipeline_task=0.5} 2>&1 | grep -v "^# hmmgpu 0"
      log pyhmmer baseline
      python3 - /tmp/pfam600.hmm /tmp/proteins.fa "$T" <<'EOF'
import sys, time, pyhmmer
t = time.perf_counter()
with pyhmmer.plan7.HMMFile(sys.argv[1]) as f:
    hmms = list(f)
with pyhmmer.easel.SequenceFile(sys.argv[2], digital=True) as f:
    block = f.read_block()
n = sum(len(h) for h in pyhmmer.hmmsearch(hmms, block, cpus=int(sys.argv[3])))
print(f"pyhmmer.hmmsearch(600 queries, cpus={sys.argv[3]}): {time.perf_counter() - t:.2f} s, {n} hits")
EOF
      ;;
    hostprofile)
      log host work of the GPU process per model, step by step, over HOSTPROFILE_SEQS or the 29 M proteins
      unpack "$DATA/pfam_db/pfam35_sample600.hmm.gz" /tmp/pfam600.hmm
      timeout 400 python3 benchmarks/host_profile.py /tmp/pfam600.hmm "${HOSTPROFILE_SEQS:-$DATA/seqs/public_proteins.fa.gz}" \
          2>&1 | cut -c1-150 ;;
    startup)
      log start-up: the interpreter, imports, and the GPU process\'s steps for 600 models, twice
      unpack "$DATA/pfam_db/pfam35_sample600.hmm.gz" /tmp/pfam600.hmm
      unpack "$DATA/seqs/public_proteins.fa.gz" /tmp/proteins.fa
      for c in "pass" "import numpy" "import pyhmmer" "import hmmgpu.cli" "import numba.cuda"; do
        for flags in "" "-I -S"; do
          /usr/bin/time -f "python3 $flags -c '$c': %e s" python3 $flags -c "import sys; sys.path[:0] = ['/tmp/shim', '/tmp/site', '$PWD']; $c" 2>&1 | tail -1
        done
      done
      python3 -X importtime -c "import hmmgpu.cli, hmmgpu.search.engine, hmmgpu.forward_stage, hmmgpu.formats.seqdb" 2>&1 | sort -t'|' -k2 -n | tail -12
      for run in cold warm; do
        python3 benchmarks/startup_probe.py /tmp/pfam600.hmm /tmp/proteins.fa --out "$OUT/startup_$run.json" 2>&1 | tail -30
      done ;;
    smalljob)
      log the README command: wall against the hmmsearch binary, and where its imports go
      S=pfam_samples/samples.hmm; P=pfam_samples/938293.PRJEB85.HG003687.faa; H=/tmp/site/hmmer/data/bin/hmmsearch
      for i in 1 2 3; do
        /usr/bin/time -f "hmmgpu %e s (user %U, sys %S)" python3 -m hmmgpu search -o /dev/null --tblout /tmp/r.tbl $S $P 2>&1 | tail -1
        /usr/bin/time -f "hmmsearch binary %e s" $H -o /dev/null --tblout /tmp/h.tbl $S $P
      done
      python3 -X importtime -m hmmgpu search -o /dev/null --tblout /tmp/r.tbl $S $P 2>&1 | grep "import time" \
          | sort -t'|' -k2 -n | tail -45
      for v in 1 ""; do OPENBLAS_NUM_THREADS=$v /usr/bin/time -f "import numpy (OPENBLAS_NUM_THREADS=$v): %e s" python3 -c "import numpy"; done
      python3 -X importtime -c "import pyhmmer" 2>&1 | sort -t'|' -k2 -n | tail -8 ;;
    warmup)
      log warmup; ( time python3 -m hmmgpu warmup ) 2>&1 | tail -4 ;;
    tests)
      log gpu tests
      timeout 900 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_gpu.py tests/test_gpu_search.py \
          2>&1 | tee "$OUT/gpu_tests.log" | tail -25 ;;
    audit)
      log audit: PF00005 against the real proteins on the GPU, both lane modes, against HMMER target by target
      unpack "$DATA/pfam/PF00005.hmm.gz" /tmp/PF00005.hmm
      for lanes in 16x2 8x4; do
        timeout 250 python3 -m hmmgpu audit --backend cuda --lanes "$lanes" /tmp/PF00005.hmm \
            "$DATA/seqs/public_proteins.fa.gz" 2>&1 | tee "$OUT/audit_$lanes.txt" | tail -16
      done ;;
    swtests)
      log sw gpu tests
      timeout 600 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_sw_gpu.py 2>&1 | tee "$OUT/sw_gpu_tests.log" | tail -15 ;;
    vit)
      log Viterbi filter benchmark
      python3 benchmarks/bench_vit.py --data "$DATA" --out "$OUT" --threads "$T" 2>&1 | tail -60 ;;
    engine*)
      w=${phase#engine}; w=${w#:}
      log engine benchmark ${w:-default}
      python3 benchmarks/bench_engine.py --data "$DATA" --out "$OUT" --threads "$T" ${w:+--workloads $w} \
          ${BENCH_ENGINE_ARGS:-} 2>&1 | tail -40
      rm -rf "$OUT/work" ;;
    pieces)
      log pieces of a FASTA file for one model: settings against hmmsearch and a baseline package
      python3 benchmarks/pieces_probe.py --data "$DATA" --out "$OUT" --threads "$T" ${PIECES_ARGS:-} 2>&1 | tail -8
      rm -rf "$OUT/work" ;;
    scaling)
      log thread scaling of pyhmmer\'s stage: ranges, survivors, slices in threads and processes, hmmsearch
      timeout 500 python3 benchmarks/scaling_probe.py --data "$DATA" --out "$OUT" --threads "$T" 2>&1 | tail -40
      rm -rf "$OUT/work" ;;
    sw)
      log Smith-Waterman benchmark
      python3 benchmarks/bench_sw.py --cudasw .bench/cudasw4 --real "$DATA/seqs/public_proteins.fa.gz" \
          --out "$OUT/sw" ${BENCH_SW_ARGS:-} 2>&1 | tail -40 ;;
    bench:*)
      log ad hoc script ${phase#bench:} from .bench; source ".bench/${phase#bench:}" ;;
    *) echo "unknown phase $phase" ;;
  esac
done
log done
