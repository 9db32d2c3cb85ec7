#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time, starting from the committed seed corpus
# (copied: the committed corpus is never written to). A crash, a sanitizer report, a leak, a
# timeout (10 s an input) or more than 2 GiB of memory fails the run; its input is kept. Two
# targets run at a time.
#
#   tests/fuzz/run_fuzzers.sh FUZZ_BUILD_DIR [SECONDS]
#
# Each target runs SECONDS (default 30), ps_fuzz twice that: an input of it starts a PS on a fault
# endpoint, so it runs about 1,200 inputs a second where the others run 50,000 to 600,000 (a
# 60 s run: ps_fuzz 71,142 inputs, ring_fuzz 37,218,238). It starts first and the others share
# the second core meanwhile, so the stage takes about 3 x SECONDS.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin_dir=$1 seconds=${2:-30}
work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz.XXXXXX")
failures=0
targets=(ps_fuzz protocol_fuzz ring_fuzz checkpoint_fuzz sparse_fuzz)  # the longest first
# Two targets at a time (libFuzzer runs one process each), one a core.
seconds_of() { if [[ $1 == ps_fuzz ]]; then echo $((2 * seconds)); else echo "$seconds"; fi; }
run_one() {
  local target=$1
  mkdir -p "$work/$target"
  PSTRAIN_LOG_LEVEL=error "$bin_dir/$target" -max_total_time="$(seconds_of "$target")" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/$target-" "$work/$target" "$here/corpus/$target" \
    >"$work/$target.log" 2>&1
  echo $? >"$work/$target.status"
}
for target in "${targets[@]}"; do
  run_one "$target" &
  while (($(jobs -rp | wc -l) >= 2)); do wait -n; done
done
wait
for target in "${targets[@]}"; do
  status=$(cat "$work/$target.status" 2>/dev/null || echo "?")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log")
  if [[ $status == 0 ]]; then
    echo "fuzz: $target: ${runs:-?} inputs in $(seconds_of "$target") s, 0 crashes"
  else
    echo "fuzz: $target: FAILED (status $status); its report and input are in $work:"
    grep -E "ERROR|SUMMARY|Test unit written" "$work/$target.log" | head -n 10
    failures=$((failures + 1))
  fi
done
if ((failures)); then
  echo "fuzz: $failures target(s) failed"
  exit 1
fi
rm -rf "$work"
