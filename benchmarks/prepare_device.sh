#!/usr/bin/env bash
# Run HERE (the development machine, with network) before a call of the GPU machine: fills .bench/ and
# .whl/ for one profile and prints the `run` call that runs benchmarks/gpu_session.sh there.
#
#   bash benchmarks/prepare_device.sh [--clean] [PROFILE] [PHASE...]
#
# PROFILE (default: check) picks the shared data, the wheels and the phases:
#   check    check, GPU tests and the audit (the last two at once)                           ~8 min
#   e2e29    e2e at 29 M residues, with hmmsearch                                          ~5 min
#   e2e116   e2e at 116 M residues without hmmsearch                                      ~4 min
#   kernels  the filter kernels' GCUPS                                                    ~5-8 min
#   scaling  threads, GPUs and pyhmmer's stage                                            ~6-9 min
#   scale    600 Pfam x 116 M residues: one GPU, --devices all, LocalCUDACluster (2-4 GPUs) ~5-7 min
#   sw       Smith-Waterman GPU tests and the benchmark against CUDASW++4                 ~8 min
#   own      600 Pfam x 29 M: the default route and --postfilter hmmgpu, profiled, compared  ~5 min
# PHASEs given after the profile replace its phases (see gpu_session.sh for the list).
#
# What it writes (both in .gitignore; nothing tracked changes):
#   .bench/commit, .bench/digest   benchmarks/provenance.py: the commit and code digest of this tree
#   .bench/data/                   the profile's part of ../shared/data (HMMGPU_SHARED_DATA there)
#   .bench/cudasw4/                CUDASW++4's source (../shared/tools/cudasw4), for the sw profile
#   .whl/                          cp312 manylinux wheels of what the machine lacks (it has numpy 2.5,
#                                  numba, numba-cuda, pytest, hypothesis, matplotlib, psutil, rich):
#                                  pyhmmer, hmmer, pyopal (+ archspec, its CPU detection), scoring-matrices,
#                                  numpy < 2.5 (pinned as pyproject.toml does), parasail (sw tests), dask,
#                                  distributed and dask-cuda with their missing needs (scale)
# Downloaded wheels are kept in ${HMMGPU_WHEEL_CACHE:-~/.cache/hmmgpu-bench-wheels}. Everything that travels
# (tracked and untracked files not ignored, .bench, .whl) must stay within 64 MiB: checked at the end.
# The checkout may be shared: without --clean nothing already in .bench/ or .whl/ is removed (but another
# version of a wheel it brings, which would stop the install); --clean removes the data folders and wheels
# the profile does not need, and .bench/cudasw4 outside the sw profile.
set -euo pipefail
cd "$(dirname "$0")/.."
CLEAN=0
if [ "${1:-}" = --clean ]; then CLEAN=1; shift; fi
PROFILE=${1:-check}
[ $# -gt 0 ] && shift
SHARED=${SHARED:-$(cd .. && pwd)/shared}
CACHE=${HMMGPU_WHEEL_CACHE:-$HOME/.cache/hmmgpu-bench-wheels}
BASE="pyhmmer==0.12.3 hmmer==3.4.0.2 pyopal==0.7.3 archspec==0.2.7 scoring-matrices==0.3.5 numpy<2.5"
case "$PROFILE" in
  # on a fresh machine the 29 M run's warm-up alone took 62 s and the GPU tests about 400 s
  # (2026-11-29: the three in one call left the tests 300 s, too few), so they are two calls
  check)   DATA="seqs pfam pfam_db cudampf"; WHEELS="$BASE"; PHASES="check tests+audit"; SECONDS_EST=470 ;;
  e2e29)   DATA="seqs pfam_db"; WHEELS="$BASE"; PHASES="e2e:pfam600_29M"; SECONDS_EST=280 ;;
  e2e116)  DATA="seqs pfam_db"; WHEELS="$BASE"; PHASES="e2e:pfam600_116M"; SECONDS_EST=260 ;;
  kernels) DATA="seqs pfam cudampf"; WHEELS="$BASE"; PHASES="kernels"; SECONDS_EST=450 ;;
  scaling) DATA="seqs pfam pfam_db"; WHEELS="$BASE"; PHASES="scaling"; SECONDS_EST=500 ;;
  scale)   DATA="seqs pfam_db"; PHASES="scale"; SECONDS_EST=420
           # dask-cuda 26.10 and the dask it was made for (the machine has its other needs: pynvml, cuda-core, ...);
           # no hmmer wheel (no hmmsearch in this profile): the data and wheels stay under 64 MiB with --clean
           WHEELS="${BASE/hmmer==3.4.0.2 /} dask==2026.7.1 distributed==2026.7.1 dask-cuda==26.10.0 tornado==6.6.1 tblib==3.2.2 zict==3.0.0 locket==1.0.0 partd==1.4.2" ;;
  own)     DATA="seqs pfam_db"; PHASES="own"; SECONDS_EST=300
           # py-spy for the profiles; no hmmer wheel (no hmmsearch here) and the machine's numpy, to stay under 64 MiB
           WHEELS="pyhmmer==0.12.3 pyopal==0.7.3 archspec==0.2.7 scoring-matrices==0.3.5 py-spy==0.4.3" ;;
  sw)      DATA="seqs"; WHEELS="pyhmmer==0.12.3 pyopal==0.7.3 archspec==0.2.7 scoring-matrices==0.3.5 numpy<2.5 parasail==1.3.4"
           PHASES="swtests sw"; SECONDS_EST=480 ;;
  *) echo "unknown profile $PROFILE (check, e2e29, e2e116, kernels, scaling, scale, sw, own)" >&2; exit 2 ;;
esac
[ $# -gt 0 ] && PHASES="$*"

# provenance
python3 benchmarks/provenance.py .bench

# the shared data: the profile's folders, refreshed (with --clean: only those)
[ -d "$SHARED/data" ] || { echo "no shared data at $SHARED/data (set SHARED)" >&2; exit 1; }
mkdir -p .bench/data
if [ "$CLEAN" = 1 ]; then
  for d in .bench/data/*; do [ -e "$d" ] && [[ " $DATA " != *" $(basename "$d") "* ]] && rm -rf "$d"; done
  [ "$PROFILE" = sw ] || rm -rf .bench/cudasw4
fi
same() { [ -d "$2" ] && diff -rq "$1" "$2" >/dev/null 2>&1; }
for d in $DATA; do same "$SHARED/data/$d" ".bench/data/$d" || { rm -rf ".bench/data/$d"; cp -r "$SHARED/data/$d" .bench/data/; }; done
if [ "$PROFILE" = sw ]; then
  same "$SHARED/tools/cudasw4" .bench/cudasw4 || { rm -rf .bench/cudasw4; cp -r "$SHARED/tools/cudasw4" .bench/cudasw4; }
fi
chmod -R u+w .bench

# the wheels: one folder per requirement in the cache, downloaded once; .whl gets the profile's (with
# --clean: only those), and no other version of a project it brings
mkdir -p "$CACHE" .whl
[ "$CLEAN" = 1 ] && rm -f .whl/*.whl
project() { basename "$1" | cut -d- -f1 | tr 'A-Z-' 'a-z_'; }
for req in $WHEELS; do
  dir="$CACHE/$(echo "$req" | tr -c 'A-Za-z0-9.\n' _)"
  if ! ls "$dir"/*.whl >/dev/null 2>&1; then
    mkdir -p "$dir"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 \
        -d "$dir" "$req" 2>&1 | grep -v "^WARNING: Location" || true
    ls "$dir"/*.whl >/dev/null 2>&1 || { echo "no wheel for $req" >&2; exit 1; }
  fi
  for wheel in "$dir"/*.whl; do
    for have in .whl/*.whl; do
      [ -e "$have" ] && [ "$(project "$have")" = "$(project "$wheel")" ] && [ "$(basename "$have")" != "$(basename "$wheel")" ] \
          && { echo "replacing $have"; rm -f "$have"; }
    done
    cp "$wheel" .whl/
  done
done

# what travels: tracked and untracked-not-ignored files, and the carried .bench and .whl
python3 - <<'EOF'
import os, subprocess
files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True,
                       check=True).stdout.split(b"\0")
tree = sum(os.path.getsize(f) for f in files if f and os.path.isfile(f))
def du(top):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(top) for f in fs)
bench, whl = du(".bench"), du(".whl")
total = tree + bench + whl
mib = lambda n: f"{n / 2**20:.1f} MiB"
print(f"travels: tree {mib(tree)} + .bench {mib(bench)} + .whl {mib(whl)} = {mib(total)} (limit 64 MiB)")
for f in sorted(os.listdir(".whl")):
    print(f"  .whl/{f} {mib(os.path.getsize(os.path.join('.whl', f)))}")
if total > 64 * 2**20:
    raise SystemExit("too large for one call: run with --clean (keeps only the profile's data and wheels)")
EOF
git status --porcelain --untracked-files=all -- .bench .whl | grep . && { echo "error: .bench or .whl shows in git status" >&2; exit 1; }

COMMAND="bash benchmarks/gpu_session.sh $PHASES"
cat <<EOF

The device call (the run tool; about $((SECONDS_EST / 60)) min of the 10-minute limit, plus the machine's start):
  carry:     [".bench", ".whl"]
  timeout_s: 600
  command:   $COMMAND
Results come back in \$OUT (at most 8 files); copy them to benchmarks/results/ and run
\`python3 benchmarks/run.py prune --apply\` to keep only the newest per benchmark and device.
EOF
