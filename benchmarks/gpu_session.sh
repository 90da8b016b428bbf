#!/usr/bin/env bash
# One call on the lent GPU machine: set up the Python environment there, then run the named phases.
#
#   bash benchmarks/gpu_session.sh PHASE [PHASE...]     (from the repository root; results go to $OUT)
#
# Prepare the call here first: `bash benchmarks/prepare_device.sh [PROFILE]` fills .bench/ (provenance:
# commit and code digest; the shared data in .bench/data; CUDASW++4's source in .bench/cudasw4) and .whl/
# (the wheels the machine lacks: pyhmmer, hmmer, pyopal, scoring-matrices, archspec, numpy < 2.5, and
# parasail for the sw profile), and prints the `run` call (carry .bench and .whl) that runs this script.
#
# Phases (in order; A+B runs A and B at the same time, their logs printed when both end):
#   check          the sample search on the GPU, its table against hmmsearch's (stops the session on failure)
#   tests          pytest -m gpu ${GPU_TESTS:-tests/gpu}          -> gpu_tests_<device>_<date>.log
#   swtests        pytest -m gpu tests/sw/test_sw_gpu.py       -> sw_gpu_tests_<device>_<date>.log (needs parasail)
#   audit          hmmgpu audit, PF00005 x the 77,801 proteins, both lane modes -> audit_<lanes>_<device>_<date>.txt
#   warmup         hmmgpu warmup, timed
#   e2e[:W,...]    benchmarks/run.py e2e W (default pfam600_29M) ${BENCH_E2E_ARGS}
#   kernels        benchmarks/run.py kernels ${BENCH_KERNELS_ARGS}
#   sw             benchmarks/run.py sw ${BENCH_SW_ARGS}
#   scaling        benchmarks/run.py scaling ${BENCH_SCALING_ARGS}
#   own            600 Pfam x 29 M on the default route, then with --postfilter hmmgpu (issue 31) twice (empty
#                  caches, then warm), each under
#                  py-spy where the profile carried it (the default's with --gil: who holds the interpreter lock;
#                  the own route's too with OWN_SPY_GIL=1; OWN_SPY_RATE samples a second, default 20),
#                  tables, domain tables and reports compared -> own_postfilter_<device>_<date>.log, pyspy_*.txt.gz;
#                  then once more warm for each setting of OWN_SWEEP ("NAME=VALUE,... NAME=VALUE": constants of
#                  hmmgpu.gpu.runtime.tuning or dotted module.CONSTANT, set by the session's sitecustomize through
#                  HMMGPU_TUNING), compared too
#   routes         600 Pfam x the proteins ROUTES_COPIES times (1: 29 M residues, default; 4: 116 M), a warm run for
#                  each entry of ROUTES ("postfilter:TUNING ...", TUNING as in OWN_SWEEP or "-"; default
#                  "pyhmmer:- hmmgpu:-"), tables and domain tables compared with the first run's
#   report         600 Pfam x 29 M on the default route, warm, REPORT_PAIRS (default 3) pairs of runs writing the
#                  report (-o FILE) and not (-o /dev/null), alternately; with REPORT_TUNING (as OWN_SWEEP's) a third
#                  run in each round writes it with those constants; reports and tables compared
#   scale          benchmarks/run.py scaling --parts scale: 600 Pfam models x 116 M residues on one GPU, with
#                  --devices all and through a LocalCUDACluster, outputs compared (issue 33) -> scale_<device>_<date>.json
#   bench:SCRIPT   an ad hoc script of .bench, sourced
# Each phase runs under the time left of SESSION_SECONDS (default 585: the run tool stops a command at
# 600 s), so that what a phase wrote comes back even when the whole does not fit. The session's own
# output is in $OUT/session_<device>_<date>.log.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
START=$(date +%s)
SESSION_SECONDS=${SESSION_SECONDS:-585}
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0  # NVLink multicast off for anything that brings NCCL (the machines' rule)
if ls .whl/*.whl >/dev/null 2>&1; then  # none: the machine's own packages (a run elsewhere)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 1; }
fi
mkdir -p /tmp/shim
cat >/tmp/shim/sitecustomize.py <<'EOF'
# Put numpy.row_stack back when numpy is first imported, should the machine's numpy (2.5, which removed it and
# breaks numba-cuda 0.30.4 at its first compile) be the one imported; the carried numpy < 2.5 has it. Not at
# start-up: importing numpy there would cost every Python process of the benchmarks its import.
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


class _Tuning(importlib.abc.MetaPathFinder):
    """HMMGPU_TUNING="NAME=VALUE,..." (a sweep of the own phase): those constants replaced as soon as
    their module has run, before any other module reads them; NAME is a constant of
    hmmgpu.gpu.runtime.tuning, or a dotted module.CONSTANT."""

    def __init__(self, settings):
        self.settings = {}
        for item in settings.split(","):
            key, value = item.split("=")
            module, _, constant = key.rpartition(".")
            self.settings.setdefault(module or "hmmgpu.gpu.runtime.tuning", {})[constant] = value

    def find_spec(self, name, path, target=None):
        if name not in self.settings:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for key, value in self.settings[name].items():
                setattr(module, key, type(getattr(module, key))(float(value)))

        spec.loader.exec_module = exec_module
        return spec


import os  # noqa: E402

if os.environ.get("HMMGPU_TUNING"):
    sys.meta_path.insert(0, _Tuning(os.environ["HMMGPU_TUNING"]))
EOF
chmod +x /tmp/site/hmmer/data/bin/* 2>/dev/null
export PYTHONPATH=/tmp/shim:/tmp/site:$PWD
export PATH=/tmp/site/bin:/tmp/site/hmmer/data/bin:$PATH
export HMMGPU_SHARED_DATA=$PWD/.bench/data
# The commit and code digest of this tree, written by benchmarks/provenance.py before the call (this copy
# has no git metadata); a result whose code does not match the digest says "-stale".
export HMMGPU_COMMIT=$(cat .bench/commit 2>/dev/null || echo unknown)
[ -f .bench/digest ] && export HMMGPU_CODE_DIGEST=$(cat .bench/digest)
export NUMBA_CACHE_DIR=/tmp/numba-cache
# The machine sets PYTHONDONTWRITEBYTECODE=1 and its Python environment holds no compiled bytecode, so each
# Python process there would compile every module it imports (numpy 0.2 s, numba.cuda 0.35 s more per
# process). An installation made by pip has the bytecode, so every tool runs with Python's default caching,
# under /tmp/pycache, filled once before any timing. BENCH_BYTECODE=machine keeps the machine's setting.
if [ "${BENCH_BYTECODE:-cached}" = cached ]; then
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX=/tmp/pycache
  python3 -c "import numpy, numba.cuda, pyhmmer, hmmgpu.cli, hmmgpu.search.engine, hmmgpu.gpu.process, hmmgpu.gpu.cascade, hmmgpu.sw.api" \
      >/dev/null 2>&1
fi
DATA=$PWD/.bench/data
DEV=$(cd benchmarks && python3 -c "import common; print(common.device_name())")
DAY=$(date +%F)
exec > >(tee -a "$OUT/session_${DEV}_${DAY}.log") 2>&1
TEE=$!
finish() { exec 1>&- 2>&-; wait "$TEE" 2>/dev/null; exit "$1"; }  # the log's last lines written before the end
log() { echo "=== $(date +%T) $*"; }
unpack() { python3 -c "import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$1" "$2"; }
same_rows() { cmp -s <(grep -v '^#' "$1") <(grep -v '^#' "$2"); }  # whether two outputs are equal apart from their comment lines
left() { echo $(( SESSION_SECONDS - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import numpy, numba, pyhmmer; print('numpy', numpy.__version__, 'numba', numba.__version__, 'pyhmmer', pyhmmer.__version__)"
echo "commit $HMMGPU_COMMIT, device $DEV, $(nproc) cores, ${SESSION_SECONDS} s"

phase() {  # one phase, in this shell: its status is the phase's
  local name=$1 t
  t=$(left)
  if [ "$t" -lt 20 ]; then log "$name skipped: ${t} s left"; return 124; fi
  case "$name" in
    check)
      log check: the sample search on the GPU, its table against hmmsearch\'s
      timeout "$t" python3 -m hmmgpu search --backend cuda --tblout /tmp/check.tbl -o /dev/null pfam_samples/samples.hmm \
          pfam_samples/938293.PRJEB85.HG003687.faa || return 1
      hmmsearch --tblout /tmp/check.ref.tbl -o /dev/null pfam_samples/samples.hmm pfam_samples/938293.PRJEB85.HG003687.faa
      python3 -c "
import sys
a, b = ([l.split() for l in open(p) if not l.startswith('#')] for p in ('/tmp/check.tbl', '/tmp/check.ref.tbl'))
print('check: rows equal hmmsearch:', a == b, len(a))
sys.exit(0 if a == b and a else 1)" ;;
    tests)
      log GPU tests: kernels and search
      timeout "$t" python3 -m pytest -q -m gpu -p no:cacheprovider ${GPU_TESTS:-tests/gpu} 2>&1 | tee "$OUT/gpu_tests_${DEV}_${DAY}.log" \
          | tail -25 ;;
    swtests)
      log Smith-Waterman GPU tests
      timeout "$t" python3 -m pytest -q -m gpu -p no:cacheprovider tests/sw/test_sw_gpu.py 2>&1 \
          | tee "$OUT/sw_gpu_tests_${DEV}_${DAY}.log" | tail -15 ;;
    audit)
      log audit: PF00005 against the real proteins on the GPU, both lane modes, against HMMER target by target
      unpack "$DATA/pfam/PF00005.hmm.gz" /tmp/PF00005.hmm
      local lanes rc=0
      for lanes in 16x2 8x4; do
        timeout "$(left)" python3 -m hmmgpu audit --backend cuda --lanes "$lanes" /tmp/PF00005.hmm \
            "$DATA/seqs/public_proteins.fa.gz" 2>&1 | tee "$OUT/audit_${lanes}_${DEV}_${DAY}.txt" | tail -4
        grep -q "all stages agree" "$OUT/audit_${lanes}_${DEV}_${DAY}.txt" || rc=1
      done
      return $rc ;;
    warmup)
      log warmup; ( time timeout "$t" python3 -m hmmgpu warmup ) 2>&1 | tail -4 ;;
    e2e*)
      local w=${name#e2e}; w=${w#:}
      log e2e ${w:-pfam600_29M}
      timeout "$t" python3 benchmarks/run.py e2e ${w:-pfam600_29M} --out "$OUT" ${BENCH_E2E_ARGS:-} ;;
    kernels)
      log kernels; timeout "$t" python3 benchmarks/run.py kernels --out "$OUT" ${BENCH_KERNELS_ARGS:-} ;;
    sw)
      log Smith-Waterman benchmark
      timeout "$t" python3 benchmarks/run.py sw --out "$OUT" --cudasw .bench/cudasw4 ${BENCH_SW_ARGS:-} ;;
    scaling)
      log scaling; timeout "$t" python3 benchmarks/run.py scaling --out "$OUT" ${BENCH_SCALING_ARGS:-} ;;
    scale)
      log scale: one GPU, --devices all and a LocalCUDACluster on $(nvidia-smi -L | wc -l) GPUs
      # SCALE_SEARCH_ARGS="--postfilter hmmgpu": search options added to each run (files named after them)
      timeout "$t" python3 benchmarks/run.py scaling --parts scale --out "$OUT" \
          ${SCALE_SEARCH_ARGS:+"--scale-args=$SCALE_SEARCH_ARGS"} ${SCALE_RUNS:+"--scale-runs=$SCALE_RUNS"} ;;
    own)
      log "own post-filter: 600 Pfam x 29 M, the default route then --postfilter hmmgpu, outputs compared"
      unpack "$DATA/pfam_db/pfam35_sample600.hmm.gz" /tmp/pfam600.hmm
      unpack "$DATA/seqs/public_proteins.fa.gz" /tmp/proteins.fa
      local v run spy rc=0
      # the default route, then --postfilter hmmgpu on a fresh machine (empty caches) and again warm
      for run in pyhmmer hmmgpu hmmgpu_warm; do
        v=${run%_warm}
        spy=()
        if command -v py-spy >/dev/null; then
          spy=(py-spy record --subprocesses -r "${OWN_SPY_RATE:-20}" -f raw -o "/tmp/pyspy_${run}.txt")
          if [ "$v" = pyhmmer ] || [ -n "${OWN_SPY_GIL:-}" ]; then spy+=(--gil); fi
          spy+=(--)
        fi
        echo "=== $(date +%T) $run: --postfilter $v, commit $HMMGPU_COMMIT"
        /usr/bin/time -f "$run: %e s wall, %U s user, %S s sys" timeout "$(( $(left) - 20 ))" "${spy[@]}" python3 -m hmmgpu \
            search --backend cuda --postfilter "$v" --cpu 16 -o "/tmp/own_$v.out" --tblout "/tmp/own_$v.tbl" \
            --domtblout "/tmp/own_$v.dom" /tmp/pfam600.hmm /tmp/proteins.fa 2>&1 | grep -v -i warning | cut -c1-1400
        [ -f "/tmp/pyspy_${run}.txt" ] && gzip -c "/tmp/pyspy_${run}.txt" >"$OUT/pyspy_${run}_600_${DEV}_${DAY}.txt.gz"
      done
      # OWN_SWEEP="A=1,B=2 A=4": warm runs more, each with those tuning constants (HMMGPU_TUNING), outputs compared
      local setting
      for setting in ${OWN_SWEEP:-}; do
        echo "=== $(date +%T) hmmgpu_tuned: --postfilter hmmgpu, HMMGPU_TUNING=$setting, commit $HMMGPU_COMMIT"
        HMMGPU_TUNING=$setting /usr/bin/time -f "tuned $setting: %e s wall, %U s user, %S s sys" \
            timeout "$(( $(left) - 20 ))" python3 -m hmmgpu search --backend cuda --postfilter hmmgpu --cpu 16 \
            -o /tmp/own_tuned.out --tblout /tmp/own_tuned.tbl --domtblout /tmp/own_tuned.dom /tmp/pfam600.hmm \
            /tmp/proteins.fa 2>&1 | grep -v -i warning | cut -c1-1400
        for kind in out tbl dom; do
          same_rows "/tmp/own_pyhmmer.$kind" "/tmp/own_tuned.$kind" \
              && echo "tuned $setting $kind equal the default's" || { echo "tuned $setting $kind DIFFER"; rc=1; }
        done
      done
      for kind in out tbl dom; do
        if [ ! -s "/tmp/own_pyhmmer.$kind" ] || [ ! -s "/tmp/own_hmmgpu.$kind" ]; then
          echo "own post-filter $kind: a run wrote none"; rc=1
        elif same_rows "/tmp/own_pyhmmer.$kind" "/tmp/own_hmmgpu.$kind"; then
          echo "own post-filter $kind equal the default's ($(grep -vc '^#' "/tmp/own_pyhmmer.$kind") lines)"
        else
          echo "own post-filter $kind DIFFER from the default's"; rc=1
        fi
      done
      return $rc ;;
    routes)
      local copies=${ROUTES_COPIES:-1} db entry route setting first= rc=0
      log "routes: 600 Pfam x the proteins $copies times, runs: ${ROUTES:-pyhmmer:- hmmgpu:-}"
      unpack "$DATA/pfam_db/pfam35_sample600.hmm.gz" /tmp/pfam600.hmm
      unpack "$DATA/seqs/public_proteins.fa.gz" /tmp/proteins.fa
      db=/tmp/proteins_x$copies.fa
      # the copies' names suffixed _r1.. as the e2e workloads' (benchmarks/common.py write_proteins)
      [ -s "$db" ] || for k in $(seq "$copies"); do
        if [ "$copies" -gt 1 ]; then awk -v r="$k" '/^>/ { sub(/^>[^ \t]*/, "&_r" r) } 1' /tmp/proteins.fa; else cat /tmp/proteins.fa; fi
      done >"$db"
      python3 -m hmmgpu search --backend cuda --cpu 16 -o /dev/null /tmp/pfam600.hmm /tmp/proteins.fa >/dev/null 2>&1  # warm
      for entry in ${ROUTES:-pyhmmer:- hmmgpu:-}; do
        route=${entry%%:*}; setting=${entry#*:}; [ "$setting" = - ] && setting=
        echo "=== $(date +%T) x$copies --postfilter $route HMMGPU_TUNING=$setting, commit $HMMGPU_COMMIT"
        HMMGPU_TUNING=$setting /usr/bin/time -f "x$copies $entry: %e s wall, %U s user, %S s sys" \
            timeout "$(( $(left) - 20 ))" python3 -m hmmgpu search --backend cuda --postfilter "$route" --cpu 16 \
            -o /dev/null --tblout /tmp/r.tbl --domtblout /tmp/r.dom /tmp/pfam600.hmm "$db" 2>&1 \
            | grep -v -i warning | grep -E "wall|busy|CPU time|models:|post-filter on|Forward filter on" | cut -c1-1200
        if [ -z "$first" ]; then first=$entry; cp /tmp/r.tbl /tmp/first.tbl; cp /tmp/r.dom /tmp/first.dom; continue; fi
        for kind in tbl dom; do
          same_rows "/tmp/first.$kind" "/tmp/r.$kind" \
              && echo "x$copies $entry $kind equal $first's" || { echo "x$copies $entry $kind DIFFER from $first's"; rc=1; }
        done
      done
      return $rc ;;
    report)
      local k run o setting rc=0
      log "report: 600 Pfam x 29 M, the default route, -o FILE against -o /dev/null${REPORT_TUNING:+ and HMMGPU_TUNING=$REPORT_TUNING}"
      unpack "$DATA/pfam_db/pfam35_sample600.hmm.gz" /tmp/pfam600.hmm
      unpack "$DATA/seqs/public_proteins.fa.gz" /tmp/proteins.fa
      python3 -m hmmgpu search --backend cuda --cpu 16 -o /dev/null /tmp/pfam600.hmm /tmp/proteins.fa >/dev/null 2>&1  # warm
      for k in $(seq "${REPORT_PAIRS:-3}"); do
        for run in report null ${REPORT_TUNING:+tuned}; do
          o=/tmp/rep_$run.out; setting=
          [ "$run" = null ] && o=/dev/null
          [ "$run" = tuned ] && setting=$REPORT_TUNING
          HMMGPU_TUNING=$setting /usr/bin/time -f "report $run: %e s wall, %U s user, %S s sys" \
              timeout "$(( $(left) - 20 ))" python3 -m hmmgpu search --backend cuda --cpu 16 -o "$o" \
              --tblout "/tmp/rep_$run.tbl" /tmp/pfam600.hmm /tmp/proteins.fa 2>&1 | grep -E "s wall|busy:" | cut -c1-300
        done
      done
      same_rows /tmp/rep_report.tbl /tmp/rep_null.tbl && echo "tables equal" || { echo "tables DIFFER"; rc=1; }
      if [ -n "${REPORT_TUNING:-}" ]; then
        cmp -s <(grep -v -E '^# (CPU time|Mc/sec|Date|output directed|per-seq)' /tmp/rep_report.out) \
               <(grep -v -E '^# (CPU time|Mc/sec|Date|output directed|per-seq)' /tmp/rep_tuned.out) \
            && echo "reports equal" || { echo "reports DIFFER"; rc=1; }
      fi
      return $rc ;;
    bench:*)
      log ad hoc script ${name#bench:} from .bench; source ".bench/${name#bench:}" ;;
    *) echo "unknown phase $name"; return 2 ;;
  esac
}

status=0
for group in "$@"; do
  if [[ "$group" == *+* ]]; then  # phases at the same time (checks, not timings: they share the machine)
    IFS=+ read -ra names <<<"$group"
    pids=()
    for n in "${names[@]}"; do ( phase "$n" ) >"/tmp/phase_$n.log" 2>&1 & pids+=($!); done
    for i in "${!names[@]}"; do
      wait "${pids[$i]}"; rc=$?
      cat "/tmp/phase_${names[$i]}.log"; log "${names[$i]} ended ($rc)"
      [ "$rc" -eq 0 ] || status=1
    done
  else
    phase "$group"; rc=$?
    log "$group ended ($rc)"
    [ "$rc" -eq 0 ] || status=1
    if [ "$group" = check ] && [ "$rc" -ne 0 ]; then echo "check failed: session stopped"; finish 1; fi
  fi
done
log "done in $(( $(date +%s) - START )) s (status $status)"
finish $status
