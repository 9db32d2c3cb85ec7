#!/usr/bin/env bash
# Exercises launch/launch.sh with the fake binaries beside this file (no build needed): output
# prefixes and logs, counts from flags and config, start-up and exit deadlines, a worker that
# fails, a worker SIGKILLed, SIGTERM/SIGINT to the launcher (also while processes are stopped, and
# a second one while it stops them), --devices and batch= in a hostfile (in dry-run form too),
# --dry-run's check with the binaries (--check-config), a run directory in use, and that no
# process of a run survives it. Each case marks its processes with a unique string and checks
# with pgrep.
#
#   tests/launch/check_launch.sh        prints one line per check, exits 1 if any failed
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
launch=$repo/launch/launch.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/check_launch.XXXXXX")
export PSTRAIN_PS_BIN=$here/fake_ps.sh PSTRAIN_WORKER_BIN=$here/fake_worker.sh
# shellcheck source=check_lib.sh
source "$here/check_lib.sh"

# start CASE [VAR=value...] -- [launch.sh flags]: runs launch.sh in the background.
# Sets case, marker, run (its run dir), out (its stdout+stderr) and lpid.
start() {
  case=$1
  shift
  local -a envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  marker="cl-$$-$RANDOM-$case"
  run=$work/$case-$marker
  out=$work/$case.out
  : >"$out"  # exists before the background job opens it, for wait_for's first grep
  env --default-signal=INT "${envs[@]}" bash "$launch" --no-setup --run-dir "$run" "$@" \
    -- --fake-marker "$marker" >"$out" 2>&1 &
  lpid=$!
}

pid_of() { sed -nE "s/^launch: started $1 \(pid ([0-9]+)\)$/\1/p" "$out"; }

case_default_job() {
  start default_job --
  finish 20
  expect_exit 0 20
  check "first line names the run dir" test "$(head -n1 "$out")" = "launch: run directory $run"
  check "1 PS and 2 workers from the config" \
    test "$(cut -f1 "$run/cmd.txt" | tr '\n' ' ')" = "ps0 w0 w1 "
  check "config passed as an absolute path" \
    file_has "$run/cmd.txt" \
    "^w1	[0-9]+	.*--config $repo/configs/fashion_mlp.cfg --index 1 --num-ps 1 --num-workers 2 "
  check "chief's summary printed with its prefix" out_has '^\[w0\] summary: test_accuracy=0\.9$'
  check "stderr lines prefixed too; workers reach the PS over ipc by default" \
    out_has '^\[w1\] fake w1 of 2: connecting to ipc://@pstrain-[0-9]+-ps0 '
  check "the PS is told to listen on that ipc name" file_has "$run/cmd.txt" "^ps0	.* --ipc @pstrain-[0-9]+-ps0 "
  check "PS output prefixed" out_has '^\[ps0\] fake ps0: all 2 workers done; exiting$'
  check "log files unprefixed" file_has "$run/w0.log" '^summary: test_accuracy=0\.9$'
  check "PS log written" file_has "$run/ps0.log" '^fake ps0: listening on '
  check "completion line" out_has "^launch: training completed; logs in $run\$"
}

case_flags_and_config() {
  local port=$((30000 + RANDOM % 20000))
  printf '# test config\nnum-ps = 3  # overridden by --num-ps\nnum-workers = 1\nlr = 0.1\n' \
    >"$work/test.cfg"
  start flags_and_config -- --config "$work/test.cfg" --num-ps 2 --base-port "$port" --transport tcp
  finish 20
  expect_exit 0 20
  check "--num-ps beats the config, num-workers from it" \
    test "$(cut -f1 "$run/cmd.txt" | tr '\n' ' ')" = "ps0 ps1 w0 "
  check "PS s gets port P+s" file_has "$run/cmd.txt" "^ps1	.* --port $((port + 1)) "
  check "each PS is told the shards on its host (its memory's share)" \
    test "$(grep -cE -- "^ps[01]	.* --shards-on-host 2 " "$run/cmd.txt")" -eq 2
  check "no ipc with --transport tcp" test "$(grep -c -- "--ipc" "$run/cmd.txt")" -eq 0
  check "workers get both PS addresses" \
    file_has "$run/w0.log" "connecting to 127\.0\.0\.1:$port 127\.0\.0\.1:$((port + 1)) "
  check "job flags after -- reach every process" \
    test "$(grep -c -- "--fake-marker $marker\$" "$run/cmd.txt")" -eq 3
}

case_worker_fails() {
  start worker_fails FAKE_FAIL_INDEX=1 -- --num-workers 3
  finish 15
  expect_exit 1 10
  check "names w1 and its status" \
    out_has '^launch: w1 \(pid [0-9]+\) died: exited with status 3; stopping all$'
}

case_worker_killed() {
  start worker_killed FAKE_HANG=1 --
  wait_for '^\[w1\] fake w1: hanging' || flunk "w1 never started hanging"
  local pid
  pid=$(pid_of w1)
  check "launch.sh reports w1's real pid" \
    grep -q -- "fake_worker.sh.*--index 1 " <(tr '\0' ' ' <"/proc/$pid/cmdline")
  kill -KILL "$pid"
  finish 15
  expect_exit 1 10
  check "names w1, pid and signal" \
    out_has "^launch: w1 \(pid $pid\) died: killed by signal 9 \(SIGKILL\); stopping all\$"
  check "no bash job notice in the output" eval "! out_has ': line [0-9]+: +[0-9]+ '"
}

case_launcher_signalled() {  # case_launcher_signalled NAME SIGNAL EXPECTED_CODE [VAR=value...]
  local sig=$2 code=$3
  start "$1" FAKE_HANG=1 "${@:4}" -- --num-ps 2 --num-workers 2
  if ! wait_for '^\[w1\] fake w1: hanging' || ! wait_for '^\[w0\] fake w0: hanging'; then
    flunk "workers never started hanging"
  fi
  kill "-$sig" "$lpid"
  finish 15
  expect_exit "$code" 10
  check "says it received SIG$sig" out_has "^launch: received SIG$sig; stopping all\$"
}

case_term_ignored() {
  case_launcher_signalled term_ignored TERM 143 FAKE_IGNORE_TERM=1 PSTRAIN_STOP_GRACE=1
  check "escalates to SIGKILL, naming the processes" \
    out_has '^launch: (w[01] ){2}still running 1s after SIGTERM; sending SIGKILL$'
}

case_stopped_processes() {  # SIGSTOPped processes get SIGCONT with their SIGTERM: no grace waited out
  start stopped_processes FAKE_HANG=1 -- --num-ps 2 --num-workers 2
  if ! wait_for '^\[w1\] fake w1: hanging' || ! wait_for '^\[w0\] fake w0: hanging'; then
    flunk "workers never started hanging"
  fi
  kill -STOP "$(pid_of ps1)" "$(pid_of w0)"
  kill -TERM "$lpid"
  finish 15
  expect_exit 143 3
  check "no SIGKILL needed" eval "! out_has 'sending SIGKILL'"
}

case_second_signal() {  # a second signal while stopping: SIGKILL at once, not after the grace
  start second_signal FAKE_HANG=1 FAKE_IGNORE_TERM=1 PSTRAIN_STOP_GRACE=60 -- --num-workers 2
  if ! wait_for '^\[w1\] fake w1: hanging' || ! wait_for '^\[w0\] fake w0: hanging'; then
    flunk "workers never started hanging"
  fi
  kill -TERM "$lpid"
  wait_for '^launch: received SIGTERM; stopping all$' || flunk "the first signal was not taken"
  kill -INT "$lpid"
  finish 15
  expect_exit 130 3
}

case_launcher_killed() {
  start launcher_killed FAKE_HANG=1 --
  wait_for '^\[w1\] fake w1: hanging' || flunk "w1 never started hanging"
  kill -KILL "$lpid"
  wait "$lpid" 2>/dev/null
  check "children of a SIGKILLed launcher exit (parent-death signal)" no_survivors 5
}

case_leftover_child() {
  start leftover_child FAKE_LEAVE_CHILD=1 --
  finish 20
  expect_exit 0 10
  check "names the process group left behind" \
    out_has '^launch: w0 left processes behind; stopping them$'
}

case_ps_fails_at_start() {
  start ps_fails FAKE_PS_FAIL_INDEX=1 -- --num-ps 2
  finish 15
  expect_exit 1 10
  check "names ps1" out_has '^launch: ps1 \(pid [0-9]+\) died: exited with status 3; stopping all$'
  check "no worker started" eval "! out_has '^launch: started w'"
}

case_flags_refused() {  # a binary that refuses its flags (exit 2) is a usage error, not restarted
  start flags_refused -- --max-restarts 3 -- --frobnicate
  finish 15
  expect_exit 2 10
  check "names the refusal" \
    out_has "^launch: ps0 \\(pid [0-9]+\\) refused its flags \\(exit status 2; see its log\\); stopping all$"
  check "restarts nothing" eval "! out_has 'restart'"
  start worker_refuses FAKE_WORKER_REFUSE=1 -- --max-restarts 3
  finish 15
  expect_exit 2 10
  check "a worker's refusal is named" out_has "^launch: w[01] \\(pid [0-9]+\\) refused its flags"
  check "the worker is not restarted" eval "! out_has 'restart'"
}

case_start_timeout() {
  start start_timeout FAKE_PS_NO_ADDR=1 PSTRAIN_START_TIMEOUT=1 --
  finish 15
  expect_exit 4 10
  check "logs the wait" out_has '^launch: waiting for ps0\.\.\.$'
  check "names ps0" out_has '^launch: ps0 did not report an address within 1s; stopping all$'
}

case_ps_lingers() {
  start ps_lingers FAKE_PS_LINGER=1 PSTRAIN_PS_EXIT_TIMEOUT=1 --
  finish 15
  expect_exit 1 10
  check "names the PS" out_has '^launch: ps0 still running 1s after the workers finished'
}

# A PS that saves its tables for longer than PSTRAIN_PS_EXIT_TIMEOUT after the workers, saying so
# every second, is waited for: the job completes (before, it was stopped after 2 s and failed).
case_ps_saves_slowly() {
  start ps_saves_slowly FAKE_PS_SAVE_S=6 PSTRAIN_PS_EXIT_TIMEOUT=2 --
  finish 30
  expect_exit 0 20
  check "the PS saved to its end" out_has '^\[ps0\] fake ps0: saving embedding tables to /fake: 6 of 6 MiB$'
  check "completion line" out_has "^launch: training completed; logs in $run\$"
}

# SIGTERM to a checkpointing job: a PS that writes the final checkpoint for longer than
# PSTRAIN_CHECKPOINT_GRACE, saying so every second, is waited for: the job stops after its final
# checkpoint (before, it was stopped 2 s after the signal and the checkpoint lost).
case_final_checkpoint_saves_slowly() {
  printf 'num-workers = 2\ncheckpoint-dir = %s\n' "$work/final-ckpt" >"$work/final.cfg"
  start final_saves_slowly FAKE_UNTIL_STOP=1 FAKE_PS_SAVE_S=6 PSTRAIN_CHECKPOINT_GRACE=2 -- --config "$work/final.cfg"
  if ! wait_for '^\[w1\] fake w1: training until stopped' || ! wait_for '^\[w0\] fake w0: training until stopped'; then
    flunk "workers never started"
  fi
  kill -TERM "$lpid"
  finish 30
  expect_exit 143 20
  check "the chief was asked for a final checkpoint" out_has '^\[w0\] fake w0: stop requested: a final checkpoint$'
  check "the PS wrote it to its end" \
    out_has '^\[ps0\] fake ps0: saving checkpoint of version 7 to /fake: 6 of 6 MiB$'
  check "stopped after the final checkpoint" out_has '^launch: stopped after the final checkpoint \(SIGTERM\)'
}

# A second launcher on a run directory in use is refused at once, naming the first one, and
# leaves the first job's files alone.
case_run_dir_in_use() {
  start run_dir_in_use FAKE_HANG=1 --
  wait_for '^\[w0\] fake w0: hanging' || flunk "w0 never started hanging"
  local first_pid=$lpid second_out=$work/run_dir_in_use.second.out
  bash "$launch" --no-setup --run-dir "$run" -- --fake-marker "$marker" >"$second_out" 2>&1
  local second_rc=$?
  check "the second launcher exits 2" test "$second_rc" -eq 2
  check "it names the holder's pid and host" \
    file_has "$second_out" "^launch: run directory .* is in use by another job: pid $first_pid on host $(hostname): launch.sh, since "
  check "the first job's logs are still there" test -s "$run/w0.log"
  kill -TERM "$lpid"
  finish 15
  expect_exit 143 10
}

case_usage() {
  case=usage
  local flag
  bash "$launch" --help >"$work/help.out" 2>&1
  check "--help exits 0" test $? -eq 0
  for flag in --num-ps --num-workers --config --base-port --bind --transport --run-dir --no-setup --help \
    --devices --worker-batch batch= --cpu-bind --dry-run --check-config --resume --max-restarts --launcher \
    --hostfile -H --ps-hosts-list --oversubscribe --remote-dir --ssh-option; do
    check "--help explains $flag" grep -q -- "$flag" "$work/help.out"
  done
  bash "$launch" --no-setup --bogus >"$work/bogus.out" 2>&1
  check "unknown flag exits 2" test $? -eq 2
  check "unknown flag is named" grep -q "unknown flag '--bogus'" "$work/bogus.out"
  bash "$launch" --no-setup --num-workers 0 >/dev/null 2>&1
  check "--num-workers 0 exits 2" test $? -eq 2
  bash "$launch" --no-setup --transport udp >"$work/transport.out" 2>&1
  check "bad --transport exits 2 naming it" \
    test $? -eq 2 -a "$(grep -c -- "--transport: 'udp'" "$work/transport.out")" -eq 1
  bash "$launch" --no-setup --num-ps >"$work/novalue.out" 2>&1
  check "missing value exits 2" test $? -eq 2
  check "missing value is named" \
    grep -qx -- "launch: --num-ps needs a value (see launch/launch.sh --help)" "$work/novalue.out"
  bash "$launch" --no-setup --dry-run --resume=sometimes -- --checkpoint-dir "$work/ckpt" >"$work/resume.out" 2>&1
  check "bad --resume value exits 2 naming it" \
    test $? -eq 2 -a "$(grep -c -- "--resume=sometimes: the value is auto" "$work/resume.out")" -eq 1
  bash "$launch" --no-setup --dry-run lr 0.1 >"$work/stray.out" 2>&1
  check "an argument before -- exits 2" \
    test $? -eq 2 -a "$(grep -c "unexpected argument 'lr' (job flags go after --)" "$work/stray.out")" -eq 1
  bash "$launch" --no-setup --config "$work/missing.cfg" >/dev/null 2>&1
  check "missing config exits 2" test $? -eq 2
  PSTRAIN_WORKER_BIN=$work/missing bash "$launch" --no-setup --run-dir "$work/nobin" \
    >/dev/null 2>&1
  check "missing binary exits 3" test $? -eq 3
}

case_devices() {
  start devices CUDA_VISIBLE_DEVICES=3,5 -- --devices cpu,cuda:1
  finish 20
  expect_exit 0 20
  check "one worker per device, each with its --device" \
    test "$(sed -nE 's/^(w[0-9]+)	.* --device ([a-z0-9:]+) .*/\1=\2/p' "$run/cmd.txt" | tr '\n' ' ')" = "w0=cpu w1=cuda:1 "
  check "the placement shows the devices" out_has '^launch:   w1   on localhost  local rank 1  device cuda:1$'
  CUDA_VISIBLE_DEVICES=3 bash "$launch" --no-setup --dry-run --devices cuda:0,cuda:1 >"$work/cvd.out" 2>&1
  check "a cuda:K beyond CUDA_VISIBLE_DEVICES exits 2 naming both" \
    test $? -eq 2 -a "$(grep -cF "cuda:1 needs 2 visible GPU(s), but CUDA_VISIBLE_DEVICES='3'" "$work/cvd.out")" -eq 1
}

case_hostfile_batches_dry_run() {
  case=hostfile_batches
  printf 'node1 slots=2 batch=64,32   # one per slot\nnode2 batch=16\nnode3\n' >"$work/hosts"
  bash "$launch" --no-setup --dry-run --hostfile "$work/hosts" --num-workers 4 -- --batch-size 48 \
    >"$work/batches.out" 2>&1
  check "dry run exits 0" test $? -eq 0
  check "every process, PS and workers, gets the list in worker order" \
    test "$(grep -c -- "--worker-batch 64,32,16,48'\$" "$work/batches.out")" -eq 5
  check "the placement shows each worker's batch" \
    file_has "$work/batches.out" '^launch:   w1   on node1  local rank 1  batch 32$'
  printf 'node1 slots=2 batch=64,32,8\n' >"$work/badhosts"
  bash "$launch" --no-setup --dry-run --hostfile "$work/badhosts" >"$work/badbatch.out" 2>&1
  check "a batch list not matching the slots exits 2 naming the line" \
    test $? -eq 2 -a "$(grep -cF "badhosts:1: batch= lists 3 sizes for 2 slot(s)" "$work/badbatch.out")" -eq 1
}

# --dry-run prints the plan and has the binaries check one command of each kind (--check-config;
# the fakes refuse --frobnicate as the real ones do); nothing starts, no run directory is made.
case_dry_run_check() {
  case=dry_run_check
  bash "$launch" --no-setup --dry-run --run-dir "$work/dry" --num-workers 3 -- --lr 0.1 >"$work/dry.out" 2>&1
  check "a good dry run exits 0" test $? -eq 0
  check "it prints every command" test "$(grep -cE '^(ps0|w[012]): .*--lr 0\.1$' "$work/dry.out")" -eq 4
  check "the PS, the chief and one other worker checked" file_has "$work/dry.out" \
    '^launch: checked ps0, w0, w1 with --check-config: fake ps: configuration OK; fake worker: configuration OK$'
  check "no run directory made" test ! -e "$work/dry"
  bash "$launch" --no-setup --dry-run --num-workers 2 -- --frobnicate >"$work/refused.out" 2>&1
  check "a job flag the binaries refuse exits 2" test $? -eq 2
  check "the refusal names the processes and the binary's message" file_has "$work/refused.out" \
    "^launch: $here/fake_worker.sh refuses the command of w0, w1 \(config .*\): fake worker: unrecognised option '--frobnicate'"
  check "the plan is printed all the same" file_has "$work/refused.out" '^w1: .* --frobnicate$'
  PSTRAIN_PS_BIN=$work/missing/pstrain-ps PSTRAIN_WORKER_BIN=$work/missing/pstrain-worker \
    bash "$launch" --no-setup --dry-run >"$work/unbuilt.out" 2>&1
  check "without binaries the dry run exits 0" test $? -eq 0
  check "it says it could not check" file_has "$work/unbuilt.out" \
    "^launch: could not check w0, w1 with the binaries \(--check-config\): $work/missing/pstrain-worker is not built"
  check "and prints the plan" file_has "$work/unbuilt.out" '^w0: .*pstrain-worker --config '
}

main() {
  case_usage
  case_dry_run_check
  case_default_job
  case_flags_and_config
  case_worker_fails
  case_worker_killed
  case_launcher_signalled sigterm TERM 143
  case_launcher_signalled sigint INT 130
  case_term_ignored
  case_stopped_processes
  case_second_signal
  case_launcher_killed
  case_leftover_child
  case_ps_fails_at_start
  case_flags_refused
  case_start_timeout
  case_ps_lingers
  case_ps_saves_slowly
  case_final_checkpoint_saves_slowly
  case_run_dir_in_use
  case_devices
  case_hostfile_batches_dry_run
  report_and_exit check_launch
}

main
