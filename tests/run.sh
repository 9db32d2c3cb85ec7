#!/usr/bin/env bash
# Runs every test: installs missing Debian packages, builds pstrain (launch/setup.sh) and runs
# the suite in four stages:
#   main      the Release build (CUDA compiled where nvcc exists), every test (ctest)
#   asan      the whole suite again but the cluster and memory checks, built with clang's AddressSanitizer +
#             UndefinedBehaviorSanitizer
#   tsan      the tests labelled threads (threads, processes, sockets), built with ThreadSanitizer
#   fuzz      every libFuzzer target of tests/fuzz for PSTRAIN_FUZZ_SECONDS each (default 30, or 90
#             beside the TSan stage; ps_fuzz twice that)
# The sanitizer builds run beside the main stage's tests (prebuild_sanitizers), and the fuzzers
# beside the TSan stage's (fuzz_beside_tsan), each niced into the CPU those tests leave idle.
#
#   tests/run.sh                    all four stages (what CI runs)
#   tests/run.sh -R Mirrored -V     arguments: only the main build's ctest, with them
#   PSTRAIN_TEST_STAGES="main fuzz" tests/run.sh     some stages only
#   tests/run.sh -L '^unit$'         the pure computations only (ctest labels: tests/CMakeLists.txt)
#
# Exit status: non-zero when the setup, a build or any stage failed (each failed stage is named).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR/..
# shellcheck source=launch/setup.sh
source "$repo/launch/setup.sh"
# What only the tests use: real sshd in network namespaces, a single-node Slurm, Open MPI
# (tests/cluster/); clang with its sanitizer and libFuzzer runtimes; pgrep; ccache (the builds reuse
# the objects of the last run on this machine: launch/setup.sh).
PSTRAIN_PACKAGES+=(openssh-server openssh-client iproute2 procps slurmctld slurmd slurm-client munge
  openmpi-bin clang libclang-rt-14-dev ccache python3-venv)
# Parquet is built in (pyarrow from PyPI: launch/setup.sh), so its tests (parquet_data) run in CI;
# the setup fails where it cannot be.
export PSTRAIN_PARQUET=${PSTRAIN_PARQUET:-on}
pstrain_setup </dev/null || exit $?

# The tests' Python (tests/python.sh runs the Python tests with it): a venv made from Debian's
# python3, so that it sees Debian's numpy and matplotlib, with what Debian 12 lacks from PyPI:
# tensorboard (the real reader of the event files the worker writes), safetensors, and torch (the
# Python package's PyTorch tests; PyPI's Linux wheel brings CUDA's libraries, some 5 GB). It lives
# outside the checkout, in PSTRAIN_TEST_VENV (default ~/.cache/pstrain/test-venv), so that a
# clean clone on a machine that ran the tests before installs nothing. Where PyPI cannot be
# reached, a warning: the tests that need these packages skip, saying so.
test_python() {
  local venv python=/usr/bin/python3
  venv=$(bash "$repo/tests/python.sh" --venv)
  [[ -x $python ]] || python=$(command -v python3)
  if [[ ! -x $venv/bin/python3 ]] && ! { mkdir -p "$(dirname "$venv")" && "$python" -m venv --system-site-packages "$venv" </dev/null; }; then
    echo "tests: warning: cannot make $venv (python3 -m venv): the tensorboard, safetensors and torch checks will skip"
    return 0
  fi
  "$venv/bin/python3" -c 'import tensorboard, safetensors, torch' 2>/dev/null && return 0
  echo "tests: installing tensorboard, safetensors and torch into $venv (PyPI; once per machine)"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check 'tensorboard>=2.14' 'safetensors>=0.4' \
    'torch>=2.1' </dev/null || echo "tests: warning: pip could not install them: the checks that need them will skip"
}
test_python
main_build=$(pstrain_build_dir)
jobs=$(nproc 2>/dev/null || echo 2)
# Tests at once, per stage: what the stage's tests leave of the CPU (user + sys time over wall time
# of the whole stage, measured on CI's 2 cores at -j2: main 535 core-s in 360 s, 74% of the cores;
# ASan 536 in 268, all of them; TSan 398 in 474, 42%: its jobs wait on peers' deadlines and
# processes far more than they compute). A stage with idle cores runs more tests than cores.
main_parallel=$((jobs + 1)) asan_parallel=$jobs tsan_parallel=$((2 * jobs))

if (($#)); then
  exec ctest --test-dir "$main_build" --output-on-failure -j"$main_parallel" "$@" </dev/null
fi

# sanitizer_build DIR SANITIZERS [cmake args]: configures (once, clang, no CUDA) and builds.
sanitizer_build() {
  local dir=$1 sanitize=$2
  shift 2
  if [[ ! -f $dir/CMakeCache.txt ]]; then
    echo "tests: configuring $dir (clang, -fsanitize=$sanitize)"
    local launcher
    mapfile -t launcher < <(pstrain_compiler_launcher)
    CC=clang CXX=clang++ cmake -S "$repo" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPSTRAIN_ENABLE_CUDA=OFF -DPSTRAIN_SANITIZE="$sanitize" "${launcher[@]}" "$@" </dev/null >/dev/null || return 1
  fi
  echo "tests: building $dir"
  cmake --build "$dir" -j"$jobs" </dev/null >"$dir/build.log" 2>&1 || { tail -n 40 "$dir/build.log"; return 1; }
}

# The ten slowest tests of a stage's last run (ctest's own record of each test's time: name, runs,
# seconds), so the suite's time can be seen where it goes. A test with no run yet (skipped, or
# not in this stage) shows its COST there, not a time: left out.
print_slowest() {
  local costs=$1/Testing/Temporary/CTestCostData.txt
  [[ -f $costs ]] || return 0
  echo "tests: the slowest tests of $1:"
  awk '/^---/ {exit} NF >= 3 && $(NF - 1) > 0 {print $NF, $1}' "$costs" | sort -rn | head -n 10 |
    awk '{printf "tests:   %7.1f s  %s\n", $1, $2}'
}

# The sanitizer builds can run beside the main stage's tests, which spend much of their time
# waiting on deadlines and child processes: started before it (when a sanitizer stage follows),
# niced so the tests keep the CPU when they want it, one build after the other. Their output goes
# to DIR.prebuild.log, shown when a stage needs the build; each one's status to DIR.prebuild.status.
prebuild_pid=
prebuild_sanitizers() {
  local -a dirs=()
  [[ " $stages " == *" asan "* || " $stages " == *" fuzz "* ]] && dirs+=(asan)
  [[ " $stages " == *" tsan "* ]] && dirs+=(tsan)
  ((${#dirs[@]})) || return 0
  rm -f "$main_build"-{asan,tsan}.prebuild.status
  (
    renice -n 10 "$BASHPID" >/dev/null 2>&1
    for which in "${dirs[@]}"; do
      case $which in
        asan) sanitizer_build "$main_build-asan" address,undefined -DPSTRAIN_FUZZ=ON ;;
        tsan) sanitizer_build "$main_build-tsan" thread ;;
      esac >"$main_build-$which.prebuild.log" 2>&1
      echo $? >"$main_build-$which.prebuild.status"
    done
  ) </dev/null &
  prebuild_pid=$!
  echo "tests: building ${dirs[*]} beside the main stage (niced)"
}

# sanitizer_ready WHICH DIR SANITIZERS [cmake args]: the build prebuild_sanitizers made (waited
# for, its output shown), or, without one, sanitizer_build now.
sanitizer_ready() {
  local which=$1
  shift
  if [[ -n $prebuild_pid ]]; then
    wait "$prebuild_pid"
    prebuild_pid=
  fi
  local status_file=$main_build-$which.prebuild.status
  if [[ -f $status_file ]]; then
    cat "$main_build-$which.prebuild.log"
    local status
    status=$(<"$status_file")
    rm -f "$status_file"
    return "$status"
  fi
  sanitizer_build "$@"
}

stage_main() {
  prebuild_sanitizers
  ctest --test-dir "$main_build" --output-on-failure -j"$main_parallel" </dev/null
  local status=$?
  print_slowest "$main_build"
  return $status
}

stage_asan() {
  sanitizer_ready asan "$main_build-asan" address,undefined -DPSTRAIN_FUZZ=ON || return 1
  # The cluster checks (label cluster: sshd in namespaces, Slurm, Open MPI) test the launcher's
  # starters, which the main stage covers; they run once. Nor the script label (Python and shell
  # with fake binaries: nothing instrumented runs). Nor the memory label: their assertions
  # are peak memory, which ASan's quarantine inflates (a streamed resume measured 2.06x its tables
  # under ASan, 1.32x in the Release build). Nor the Python package's tests: the sanitizer builds
  # build no module (an instrumented one needs its runtime preloaded into Python).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$main_build-asan" --output-on-failure -j"$asan_parallel" -LE '^(cluster|memory|script)$' -E '^(Cuda|Nccl|python_)|Nccl' </dev/null
  local status=$?
  print_slowest "$main_build-asan"
  return $status
}

# Threads and processes: the tests labelled threads (tests/CMakeLists.txt: the ring, prefetch,
# thread pools, ZeroMQ, shared memory, forks, the PS's and workers' I/O, jobs), which a suite is
# unless it is listed as unit: the unit ones have no second thread for TSan to watch, and the
# cluster checks are not labelled threads (they run once, in the main stage).
# Not the memory label (SparseSaveTest): peak memory, which TSan's shadow pages inflate (0.34 of
# the tables where the Release build measures 0.05).
stage_tsan() {
  sanitizer_ready tsan "$main_build-tsan" thread || return 1
  fuzz_beside_tsan
  TSAN_OPTIONS="suppressions=$repo/tests/tsan.supp halt_on_error=1" \
    ctest --test-dir "$main_build-tsan" --output-on-failure -j"$tsan_parallel" -L '^threads$' -LE '^memory$' \
    -E '^(Cuda|BenchSmoke|launch_|ssh_cluster|slurm_mpi|python_)|Nccl' </dev/null
  local status=$?
  print_slowest "$main_build-tsan"
  return $status
}

# The TSan stage uses about half of the cores (its jobs wait on deadlines and processes: 398
# core-s in 474 s on 2 cores at -j2; 330 to 355 s at -j4), and the fuzzers, each a core for a
# fixed time, took 94 s after it: when both stages run, the fuzzers start with the TSan stage's
# tests, niced (10) so that the tests keep the CPU when they want it; stage_fuzz waits for them.
# Niced, a fuzzer ran 14% to 39% of its inputs of a run alone in the same seconds (ring_fuzz
# 2.4 M against 15.7 M, ps_fuzz 14,038 against 36,013): beside the TSan stage they run three times
# as long (PSTRAIN_FUZZ_SECONDS, default 90 there: 3 x 90 s of two lanes, within the ~300 s of
# the stage): a fresh clone's run got 53% to 80% of a lone run's inputs (ps_fuzz 28,885, ring_fuzz
# 12.3 M) with the stage at 335 s.
fuzz_pid=
fuzz_beside_tsan() {
  [[ " $stages " == *" fuzz "* && -x $main_build-asan/tests/fuzz/ps_fuzz ]] || return 0
  rm -f "$main_build-asan/fuzz-beside-tsan.status"
  (
    renice -n 10 "$BASHPID" >/dev/null 2>&1
    bash "$repo/tests/fuzz/run_fuzzers.sh" "$main_build-asan/tests/fuzz" "${PSTRAIN_FUZZ_SECONDS:-90}"
    echo $? >"$main_build-asan/fuzz-beside-tsan.status"
  ) </dev/null >"$main_build-asan/fuzz-beside-tsan.log" 2>&1 &
  fuzz_pid=$!
  echo "tests: the fuzzers run beside the TSan stage's tests (niced)"
}

stage_fuzz() {
  if [[ -n $fuzz_pid ]]; then
    wait "$fuzz_pid"
    fuzz_pid=
    cat "$main_build-asan/fuzz-beside-tsan.log"
    return "$(cat "$main_build-asan/fuzz-beside-tsan.status" 2>/dev/null || echo 1)"
  fi
  [[ -x $main_build-asan/tests/fuzz/ps_fuzz && ! -f $main_build-asan.prebuild.status ]] ||
    sanitizer_ready asan "$main_build-asan" address,undefined -DPSTRAIN_FUZZ=ON || return 1
  bash "$repo/tests/fuzz/run_fuzzers.sh" "$main_build-asan/tests/fuzz" "${PSTRAIN_FUZZ_SECONDS:-30}"
}

failed=()
stages=${PSTRAIN_TEST_STAGES:-main asan tsan fuzz}
for stage in $stages; do
  echo "tests: ===== stage $stage ====="
  start=$SECONDS
  if ! "stage_$stage"; then
    failed+=("$stage")
  fi
  echo "tests: stage $stage took $((SECONDS - start)) s"
done
if ((${#failed[@]})); then
  echo "tests: FAILED stage(s): ${failed[*]}"
  exit 1
fi
echo "tests: every stage passed (${PSTRAIN_TEST_STAGES:-main asan tsan fuzz})"
