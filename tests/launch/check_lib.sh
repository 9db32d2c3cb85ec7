# shellcheck shell=bash
# Helpers of the launcher checks (check_launch.sh, ../cluster/check_ssh_cluster.sh): one line per
# check, bounded waits on observable progress, and the survivor check. The sourcing script sets
# `case` (current case), `out` (launch.sh's output file), `lpid` (launch.sh's pid) and `marker`
# (a string in the command line of every process of its runs).

failures=0

pass() { printf 'ok    %s: %s\n' "$case" "$1"; }
flunk() { printf 'FAIL  %s: %s\n' "$case" "$1"; failures=$((failures + 1)); }
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then pass "$what"; else flunk "$what"; fi
}

# finish SECONDS: waits for launch.sh; sets rc (999 = still running, then killed) and elapsed.
finish() {
  local deadline=$((SECONDS + $1)) start=$SECONDS
  while kill -0 "$lpid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  if kill -0 "$lpid" 2>/dev/null; then
    kill -KILL "$lpid"
    wait "$lpid"
    rc=999
  else
    wait "$lpid"
    rc=$?
  fi
  elapsed=$((SECONDS - start))
}

# wait_for REGEX [SECONDS]: waits until launch.sh's output matches (extended regex). The default
# deadline is generous: a launch that starts Python, asks the binaries for the plan and spawns the
# job took over 10 s on CI's 2 cores with three other tests running (only a failure waits it out).
wait_for() {
  local deadline=$((SECONDS + ${2:-30}))
  until grep -Eq -- "$1" "$out"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

out_has() { grep -Eq -- "$1" "$out"; }
file_has() { [[ -f $1 ]] && grep -Eq -- "$2" "$1"; }

# No process whose command line carries $marker may be left, after waiting up to $1 seconds
# (default: none).
no_survivors() {
  local deadline=$((SECONDS + ${1:-0}))
  while pgrep -f -- "$marker" >/dev/null; do
    if ((SECONDS >= deadline)); then
      pgrep -a -f -- "$marker" | sed 's/^/      survivor: /'
      return 1
    fi
    sleep 0.1
  done
}

expect_exit() {  # expect_exit CODE MAX_SECONDS
  check "exits $1 within $2 s (got $rc after ${elapsed}s)" \
    test "$rc" -eq "$1" -a "$elapsed" -le "$2"
  check "no process of the run survives" no_survivors
}

# report_and_exit NAME: the closing line; outputs are kept in $work when a check failed.
report_and_exit() {
  if ((failures)); then
    echo "$1: $failures check(s) failed; outputs kept in $work"
    exit 1
  fi
  rm -rf "$work"
  echo "$1: all checks passed"
  exit 0
}

# A python3 (the tests' venv's, tests/python.sh, or one on PATH) that imports numpy and the
# package in $build/python, the Python the package was built for; else why not, and status 1.
python_with_package() {
  local p
  for p in "$(bash "$repo/tests/python.sh" --venv)/bin/python3" $(type -ap python3); do
    if [[ -x $p ]] && PYTHONPATH=$build/python "$p" -c 'import numpy, pstrain._core' 2>/dev/null; then
      printf '%s\n' "$p"
      return 0
    fi
  done
  echo "no python3 imports numpy and the Python package in $build/python (pybind11-dev, python3-dev, python3-numpy)"
  return 1
}
