#!/usr/bin/env bash
# launch/launch.sh --hostfile across real hosts: network namespaces on a bridge, each with its
# own address and its own sshd (tests/cluster/netns_hosts.sh), the real binaries started over
# ssh. Checks: a job spread over 3 hosts equals the same job run locally; kill -9 of a remote
# worker stops everything everywhere, naming it; SIGKILL of the launcher leaves no process on
# any host; an unreachable host and a port taken on a host are clear errors naming the host; an
# allreduce job across hosts equals the local one; a 2 s network partition between a worker's
# host and the PS's host is ridden out, bit-identical, with the time it cost printed (a line
# "partition: ..."); 32 workers and 4 PS shards on 4 hosts complete; --bind 0.0.0.0 gives every
# process CURVE and equals the local run; Python workers (--worker-cmd) across hosts equal the
# local run, and launch.sh status, stop and --resume work on them.
#
#   tests/cluster/check_ssh_cluster.sh     one line per check; exit 1 if any failed,
#                                          77 (skipped, with the reason) without root/netns
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
launch=$repo/launch/launch.sh
# shellcheck source=netns_hosts.sh
source "$here/netns_hosts.sh"
# shellcheck source=../launch/check_lib.sh
source "$repo/tests/launch/check_lib.sh"

why=$(netns_hosts_unavailable)
if [[ -n $why ]]; then
  echo "check_ssh_cluster: SKIPPED: $why"
  exit 77
fi
build=${PSTRAIN_BUILD_DIR:-$repo/build}
for bin in pstrain-ps pstrain-worker; do
  [[ -x $build/$bin ]] || { echo "check_ssh_cluster: $build/$bin is missing (build first)"; exit 1; }
done
export PSTRAIN_BUILD_DIR=$build
work=$(mktemp -d "${TMPDIR:-/tmp}/check_ssh_cluster.XXXXXX")
trap 'netns_hosts_down' EXIT
netns_hosts_up "$work" 4 || { echo "check_ssh_cluster: could not make the test hosts"; exit 1; }
A=${HOST_ADDRS[0]} B=${HOST_ADDRS[1]} C=${HOST_ADDRS[2]} D=${HOST_ADDRS[3]}
base_port=$((20000 + $$ % 20000))

# Every process of these jobs carries $work in its command line (--cache-dir), so survivors are
# found with pgrep in every namespace (they share this machine's process ids).
job=(--hidden 16 --optimizer momentum --lr 0.05 --cache-dir "$work/cache")
marker=$work/cache
worker_bin=$build/pstrain-worker

# expect_remote_exit CODE MAX_SECONDS: the launcher's status and time, then no process of the job
# on any host within 30 s (remote processes stop when their ssh channel ends, a moment after the
# launcher has seen their ssh clients go).
expect_remote_exit() {
  check "exits $1 within $2 s (got $rc after ${elapsed}s)" test "$rc" -eq "$1" -a "$elapsed" -le "$2"
  check "no process of the job left on any host within 30 s" no_survivors 30
}

# start CASE [VAR=value...] -- [launch.sh flags]: runs launch.sh in the background.
start() {
  case=$1
  shift
  local -a envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  run=$work/$case
  out=$work/$case.out
  : >"$out"
  env "${envs[@]}" bash "$launch" --no-setup --run-dir "$run" "$@" >"$out" 2>&1 &
  lpid=$!
}

case_matches_local() {
  start local_reference -- --num-ps 1 --num-workers 1 -- "${job[@]}" --timeout 30 --steps 20 --batch-size 24 \
    --save-params "$work/local-params"
  finish 120
  check "local reference job exits 0 (got $rc)" test "$rc" -eq 0
  printf '%s slots=2\n%s slots=1  # comment\n%s\n' "$A" "$B" "$C" >"$work/hosts3"
  start three_hosts -- --hostfile "$work/hosts3" --base-port "$base_port" --num-ps 2 --num-workers 4 \
    -- "${job[@]}" --timeout 30 --steps 20 --batch-size 6 --save-params "$work/cluster-params"
  finish 120
  expect_exit 0 120
  check "placement printed: ps1 on the second host" out_has "^launch:   ps1  on $B +local rank 0  port $((base_port + 1))\$"
  check "placement printed: w1 fills host A's second slot" out_has "^launch:   w1   on $A +local rank 1\$"
  check "w2 on host B, w3 on host C" out_has "^launch:   w3   on $C +local rank 0\$"
  check "chief's summary reports test_accuracy" out_has "^\[w0@$A\] .*summary: .*test_accuracy="
  check "per-process log in the run directory" file_has "$run/w3.log" "connecting to ps1 at $B:$((base_port + 1))"
  check "parameters equal the local run's" python3 "$here/compare_params.py" "$work/local-params" "$work/cluster-params"
  check "CURVE is on by default across hosts" out_has "^\[ps1@$B\] .*security: CURVE \(encrypted, peers authenticated by the job's key from PSTRAIN_CURVE_SECRET_KEY\)"
  check "the job key was made in the run directory, 0600" test "$(stat -c %a "$run/job.key")" = 600
  check "the key never appears on a command line" eval "! grep -q \"\$(sed -n 's/^secret = //p' '$run/job.key')\" '$run/cmd.txt'"
  local shown
  shown=$(bash "$launch" status "$run")
  check "status: ended, every process by host through its ssh client" eval \
    'grep -q "^state: not running: ended .* with exit status 0 (training completed)" <<<"$shown" &&
     grep -Eq "^  w3@$C +on $C  pid [0-9]+ \(its ssh pid\)  exited with status 0\$" <<<"$shown"'
}

case_insecure() {
  printf '%s\n%s\n' "$A" "$B" >"$work/hosts_insecure"
  start insecure -- --hostfile "$work/hosts_insecure" --base-port "$base_port" --num-workers 2 \
    -- "${job[@]}" --timeout 30 --steps 10 --insecure
  finish 120
  expect_exit 0 120
  check "--insecure works and warns" out_has "^\[ps0@$A\] .*--insecure: traffic to and from non-loopback addresses is neither authenticated nor encrypted"
  check "no job key made" test ! -e "$run/job.key"
}

# launch.sh --bind 0.0.0.0 (docs/operations.md recommends it) across hosts: every process gets
# --curve from the launcher's one rule (docs/security.md), the PS and the worker beside it on
# host A as the one on B, and the job trains what the local reference trained (one worker of 24
# against two of 12).
case_bind_all() {
  printf '%s\n%s\n' "$A" "$B" >"$work/hosts_bind"
  start bind_all -- --hostfile "$work/hosts_bind" --bind 0.0.0.0 --base-port "$base_port" --num-workers 2 \
    -- "${job[@]}" --timeout 30 --steps 20 --batch-size 12 --save-params "$work/bind-all-params"
  finish 120
  expect_exit 0 120
  check "--bind 0.0.0.0: every process is told --curve" \
    test "$(grep -c -- ' --curve ' "$run/cmd.txt")" -eq 3
  check "--bind 0.0.0.0: the worker beside the PS uses CURVE" \
    out_has "^\[w0@$A\] .*security: CURVE \(encrypted, peers authenticated by the job's key"
  check "--bind 0.0.0.0: parameters equal the local run's" \
    python3 "$here/compare_params.py" "$work/local-params" "$work/bind-all-params"
}

case_remote_worker_killed() {
  printf '%s slots=1\n%s slots=2\n' "$A" "$B" >"$work/hosts2"
  start remote_kill -- --hostfile "$work/hosts2" --base-port "$base_port" --num-workers 3 \
    -- "${job[@]}" --timeout 30 --epochs 1000 --batch-size 4
  wait_for "^\[w2@$B\] .*training" 60 || flunk "w2 never started training"
  local pid
  pid=$(pgrep -f -- "^$worker_bin .*--index 2 .*$marker")
  check "found the remote worker's pid" test -n "$pid"
  kill -KILL $pid
  finish 30
  expect_remote_exit 1 30
  check "names w2 on its host and the signal" \
    out_has "^launch: w2@$B \(pid [0-9]+\) died: killed by signal 9 \(SIGKILL\); stopping all\$"
}

# The ssh connection of one remote process drops (its ssh client is killed): that process stops
# (its standard input ended), the launcher names it, and nothing is left on any host.
case_connection_dropped() {
  printf '%s\n%s\n' "$A" "$B" >"$work/hosts_drop"
  start connection_dropped -- --hostfile "$work/hosts_drop" --base-port "$base_port" --num-workers 2 \
    -- "${job[@]}" --timeout 30 --epochs 1000 --batch-size 4
  wait_for "^\[w1@$B\] .*training" 60 || flunk "w1 never started training"
  local ssh_pid
  ssh_pid=$(sed -nE "s/^launch: started w1@$B \(pid ([0-9]+)\)\$/\1/p" "$out")
  check "found w1's ssh client" test -n "$ssh_pid"
  kill -KILL "$ssh_pid"
  finish 30
  expect_remote_exit 1 30
  check "names w1 on its host" out_has "^launch: w1@$B \(pid $ssh_pid\) died: "
}

case_launcher_killed() {
  printf '%s\n%s\n' "$A" "$B" >"$work/hosts2b"
  start launcher_killed -- --hostfile "$work/hosts2b" --base-port "$base_port" --num-workers 2 \
    -- "${job[@]}" --timeout 30 --epochs 1000 --batch-size 4
  wait_for "^\[w1@$B\] .*training" 60 || flunk "w1 never started training"
  check "remote processes run before the kill" eval 'pgrep -f -- "^$worker_bin .*$marker" >/dev/null'
  kill -KILL "$lpid"
  wait "$lpid" 2>/dev/null
  check "no process of the job left on any host within 30 s" no_survivors 30
}

case_unreachable_host() {
  local ghost=${A%.*}.99
  printf '%s\n%s\n' "$A" "$ghost" >"$work/hosts_ghost"
  start unreachable PSTRAIN_START_TIMEOUT=3 -- --hostfile "$work/hosts_ghost" --num-workers 2 \
    -- "${job[@]}" --timeout 30 --steps 5
  finish 30
  expect_exit 4 15
  check "names the unreachable host" out_has "^launch: host $ghost: (ssh failed|no answer)"
  check "and only that host" eval "! out_has '^launch: host $A:'"
  check "nothing was started" eval "! out_has '^launch: started '"
}

case_port_taken() {
  local ns=${NETNS_NAMES[1]}
  : >"$work/squatter.out"
  ip netns exec "$ns" python3 -c 'import socket,sys,time
s=socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); print("ready", flush=True); time.sleep(60)' \
    "$B" "$base_port" >"$work/squatter.out" 2>&1 &
  local squatter=$!
  local deadline=$((SECONDS + 10))
  until grep -q ready "$work/squatter.out" || ((SECONDS >= deadline)); do sleep 0.1; done
  printf '%s\n%s\n' "$B" "$A" >"$work/hosts_port"
  start port_taken -- --hostfile "$work/hosts_port" --base-port "$base_port" --num-workers 2 \
    -- "${job[@]}" --timeout 30 --steps 5
  finish 60
  kill "$squatter" 2>/dev/null
  wait "$squatter" 2>/dev/null
  expect_remote_exit 1 60
  check "names ps0 on the host whose port is taken" out_has "^launch: ps0@$B \(pid [0-9]+\) died: exited with status"
  check "the PS says which address it could not bind" \
    out_has "^\[ps0@$B\] .*cannot bind the parameter server on tcp://0\.0\.0\.0:$base_port: Address already in use"
}

# allreduce across hosts: worker 0 hosts the ring's rendezvous on all interfaces. The hosts share
# this machine's host name, which resolves to no address the others can reach: rank 0's ring
# address must be the one the others reached its coordinator at (as before the fix, a name that
# does not resolve there made the ring's link check time out). The result is the local run's.
case_allreduce_across_hosts() {
  start ring_local -- --num-workers 3 -- "${job[@]}" --mode allreduce --timeout 30 --steps 20 --batch-size 8 \
    --save-params "$work/ring-local-params"
  finish 120
  check "local allreduce reference exits 0 (got $rc)" test "$rc" -eq 0
  printf '%s\n%s\n%s\n' "$A" "$B" "$C" >"$work/hosts_ring"
  start ring_hosts -- --hostfile "$work/hosts_ring" --base-port "$base_port" --num-workers 3 \
    -- "${job[@]}" --mode allreduce --timeout 30 --steps 20 --batch-size 8 --save-params "$work/ring-hosts-params"
  finish 120
  expect_remote_exit 0 120
  check "the chief reports test_accuracy" out_has "^\[w0@$A\] .*summary: .*test_accuracy="
  check "parameters equal the local ring's" python3 "$here/compare_params.py" "$work/ring-local-params" \
    "$work/ring-hosts-params"
}

# A network partition of 2 s between w1's host and ps0's host (netns_cut: every packet, both
# ways), from a step in the middle of the run: TCP retransmits carry the job over it, and its
# parameters are the bits of the same job run without a cut. The payloads go through the sockets
# (--shared-memory off): the test hosts share this machine's /dev/shm, real hosts do not.
# Printed, not checked (they depend on the machine's load): how long no step completed, how long
# after the heal the first one did, and steps/s before the cut and after that step, with the
# uncut run's over the same steps.
case_partition() {
  local why cut_at healed_at drops figures stood cut_s=2
  why=$(netns_cut_unavailable)
  if [[ -n $why ]]; then
    echo "skip  partition: $why"
    return
  fi
  printf '%s\n%s\n%s\n' "$B" "$C" "$A" >"$work/hosts_cut"  # w0 on B, w1 on C, ps0 alone on A
  local -a flags=(--hostfile "$work/hosts_cut" --ps-hosts-list "$A" --base-port "$base_port" --num-workers 2
    -- "${job[@]}" --shared-memory off --timeout 30 --steps 1500 --batch-size 32 --log-every 1)
  start uncut -- "${flags[@]}" --save-params "$work/uncut-params"
  finish 120
  check "the uncut job exits 0 (got $rc)" test "$rc" -eq 0
  local uncut_out=$out
  start partition -- "${flags[@]}" --save-params "$work/cut-params"
  if wait_for "^\[w0@$B\] .* \(global 500\) " 60; then
    netns_cut 2 0 || flunk "could not cut host C off from host A"
    cut_at=$(time_of_day)
    sleep "$cut_s"
    healed_at=$(time_of_day)
    netns_heal 2 0 || flunk "could not heal the cut, or host C cannot reach host A after it"
    drops=$(netns_cut_drops 2)
  else
    flunk "the chief never logged step 500"
  fi
  finish 120
  expect_remote_exit 0 120
  check "the cut dropped packets of the job (${drops:-none})" test "${drops:-0}" -gt 0
  check "parameters are bit-identical to the uncut job's" same_files "$work/uncut-params" "$work/cut-params"
  figures=$(partition_figures "$uncut_out" "$out" "^\\[w0@$B\\] " "$cut_at" "$healed_at")
  echo "partition: $cut_s s cut $figures"
  stood=$(sed -nE 's/.*no step for ([0-9.]+) s.*/\1/p' <<<"$figures")
  check "no step completed during the cut (none for ${stood:-?} s)" \
    awk -v stood="${stood:-0}" -v cut="$cut_s" 'BEGIN { exit !(stood >= cut - 0.1) }'
}

# A cut longer than --timeout (60 s, --timeout 20) of the same job as case_partition's (its uncut
# run's parameters are the reference): only the worker cut off times out, naming itself and its PS
# (w0, whose PS answers it once a second while the barrier waits, waits on); the launcher names
# that pair and restarts that worker (--max-restarts 1), whose replacement registers within a
# second or two of the heal and redoes the step: the job ends bit-identical to the uncut one.
case_long_partition() {
  local why cut_at healed_at figures after cut_s=60
  why=$(netns_cut_unavailable)
  if [[ -n $why ]]; then
    echo "skip  long_partition: $why"
    return
  fi
  [[ -d $work/uncut-params ]] || { flunk "no uncut run to compare with (case_partition)"; return; }
  start long_partition -- --hostfile "$work/hosts_cut" --ps-hosts-list "$A" --base-port "$base_port" \
    --num-workers 2 --max-restarts 1 -- "${job[@]}" --shared-memory off --timeout 20 --steps 1500 \
    --batch-size 32 --log-every 1 --save-params "$work/long-cut-params"
  if wait_for "^\[w0@$B\] .* \(global 500\) " 60; then
    netns_cut 2 0 || flunk "could not cut host C off from host A"
    cut_at=$(time_of_day)
    local cut_epoch=$EPOCHSECONDS
    wait_for "^launch: w1@$C .* died: " 40 || flunk "w1 did not die within 40 s of the cut"
    while ((EPOCHSECONDS < cut_epoch + cut_s)); do sleep 0.2; done  # the cut's length, not a wait for an event
    healed_at=$(time_of_day)
    netns_heal 2 0 || flunk "could not heal the cut, or host C cannot reach host A after it"
  else
    flunk "the chief never logged step 500"
  fi
  finish 150
  expect_remote_exit 0 150
  check "the launcher names the worker cut off and its PS, and restarts it" \
    out_has "^launch: w1@$C \(pid [0-9]+\) died: exited with status 1 \(pstrain-worker: timed out after 20 s waiting for parameters from ps0 at $A:$base_port: w1 cannot reach ps0 since [0-9:]+ \(nothing from it for 20 s\)\); restarting it with the same index \(restart 1 of 1\)\$"
  check "the worker that could reach its PS was neither failed nor restarted" eval "! out_has '^launch: w0@$B .* died'"
  check "w0 heard why it waited" out_has "^\[w0@$B\] .* w0: waiting for parameters of version [0-9]+ from ps0 at $A:$base_port; ps0 waits for the push of w1 for step [0-9]+"
  check "the replacement redid the step" out_has "^\[ps0@$A\] .*worker 1 registered again from a new peer: a replacement"
  check "parameters are bit-identical to the uncut job's" same_files "$work/uncut-params" "$work/long-cut-params"
  figures=$(partition_figures "$work/uncut.out" "$out" "^\\[w0@$B\\] " "$cut_at" "$healed_at")
  echo "long partition: $cut_s s cut $figures"
  after=$(sed -nE 's/.*the first ([0-9.]+) s after the heal.*/\1/p' <<<"$figures")
  check "the first step came within 2 s of the heal (${after:-?} s)" \
    awk -v after="${after:-99}" 'BEGIN { exit !(after <= 2) }'
}

# Local time of day with microseconds, as the binaries' log lines give it (theirs: milliseconds).
time_of_day() {
  local now=$EPOCHREALTIME
  printf '%(%H:%M:%S)T.%s\n' "${now%.*}" "${now#*.}"
}

# same_files DIR1 DIR2: the same file names, each pair identical byte for byte.
same_files() {
  [[ $(cd "$1" && ls) == "$(cd "$2" && ls)" ]] || return 1
  local f
  for f in "$1"/*; do cmp -s "$f" "$2/${f##*/}" || return 1; done
}

# partition_figures UNCUT_OUT CUT_OUT PREFIX CUT_AT HEALED_AT: from the chief's step lines (the
# lines matching PREFIX; --log-every 1), the longest time without a step, the time from the heal
# to the first step after it, and steps/s over the 100 steps up to the cut, over the 100 from that
# first step, and the uncut run's over the same 100.
partition_figures() {
  awk -v prefix="$3" -v cut="$4" -v healed="$5" '
    function seconds(t,  p, s) {  # of the day; past midnight (seen from the cut) goes on counting
      split(t, p, ":")
      s = p[1] * 3600 + p[2] * 60 + p[3]
      return s < start - 43200 ? s + 86400 : s
    }
    function rate(at, from, to) {
      return (from in at && to in at && at[to] > at[from]) ? sprintf("%.0f", (to - from) / (at[to] - at[from])) : "?"
    }
    BEGIN { start = seconds(cut); end = seconds(healed) }
    FNR == 1 { file++ }
    $0 ~ prefix && match($0, /\(global [0-9]+\)/) {
      step = substr($0, RSTART + 8, RLENGTH - 9) + 0
      t = seconds($2)
      if (file == 1) { uncut[step] = t; next }
      at[step] = t
      if (last != "" && t - last > stood) stood = t - last
      last = t
      if (t <= start) before = step
      if (!after && t > end) { after = step; back = t - end }
    }
    END {
      printf "from step %d: no step for %.2f s; the first %.2f s after the heal; steps/s %s before, %s after (uncut run: %s)\n",
        before, stood, back, rate(at, before - 100, before), rate(at, after, after + 100), rate(uncut, after, after + 100)
    }' "$1" "$2"
}

# Python workers (launch.sh --worker-cmd, tests/python/numpy_worker.py on the package in
# <build>/python) across hosts: the same bits as the job run locally; launch.sh status and stop
# on such a job: the Python chief on host A writes the final checkpoint through the PS shards,
# and --resume to a few steps further ends with the bits of a local run that long.
case_python_workers() {
  case=python_workers
  local python
  python=$(python_with_package) || { echo "skip  $case: $python"; return; }
  local py=("$python" "$repo/tests/python/numpy_worker.py")
  local pyjob=(--optimizer adam --lr 0.01 --batch-size 16 --seed 5 --timeout 30 --log-every 50 --cache-dir "$marker")
  printf '%s\n%s\n' "$A" "$B" >"$work/hosts_py"
  start py_local -- --num-ps 2 --num-workers 2 --worker-cmd "${py[*]} $work/py-local.npy --" -- "${pyjob[@]}" --steps 30
  finish 120
  check "python: local reference job exits 0 (got $rc)" test "$rc" -eq 0
  start py_hosts -- --hostfile "$work/hosts_py" --base-port "$base_port" --num-ps 2 --num-workers 2 \
    --worker-cmd "${py[*]} $work/py-hosts.npy --" -- "${pyjob[@]}" --steps 30
  finish 120
  expect_exit 0 120
  check "python: w1 ran on host B" out_has "^launch: w1@$B exited 0\$"
  check "python: the workers' command over ssh names the package" \
    file_has "$run/cmd.txt" "env PYTHONPATH=$build/python $python $repo/tests/python/numpy_worker.py"
  check "python: parameters equal the local run's, bit for bit" cmp -s "$work/py-local.npy" "$work/py-hosts.npy"
  local ckpt=$work/py-ckpt shown
  start py_stop -- --hostfile "$work/hosts_py" --base-port "$base_port" --num-ps 2 --num-workers 2 \
    --worker-cmd "${py[*]} $work/py-stopped.npy --" -- "${pyjob[@]}" --steps 1000000 --checkpoint-dir "$ckpt"
  wait_for "^\[w0@$A\] .*\(global 50\) loss" 60 || flunk "python: the chief never reported step 50"
  shown=$(bash "$launch" status "$run")
  check "python: status shows w1 alive on host B" eval 'grep -Eq "^  w1@$B +on $B  pid [0-9]+ \(its ssh pid\)  alive\$" <<<"$shown"'
  bash "$launch" stop "$run" >"$work/py_stop.stop" 2>&1
  finish 60
  check "python: stopped after the chief's final checkpoint" \
    out_has '^launch: stopped after the final checkpoint \(SIGTERM\)'
  check "python: no process of the job left on any host within 30 s" no_survivors 30
  local v
  v=$(sed -nE "s/^\[w0@$A\] .*checkpoint of step ([0-9]+) complete.*/\1/p" "$out" | tail -n 1)
  check "python: the final checkpoint's manifest (step ${v:-none})" test -n "$v" -a -f "$ckpt/v$(printf %010d "${v:-0}")/MANIFEST"
  start py_resume -- --hostfile "$work/hosts_py" --base-port "$base_port" --num-ps 2 --num-workers 2 --resume \
    --worker-cmd "${py[*]} $work/py-resumed.npy --" -- "${pyjob[@]}" --steps $((v + 10)) --checkpoint-dir "$ckpt"
  finish 120
  expect_exit 0 120
  check "python: the chief resumed from the checkpoint" out_has "^\[w0@$A\] .*w0: resumed from checkpoint"
  start py_local_long -- --num-ps 2 --num-workers 2 --worker-cmd "${py[*]} $work/py-long.npy --" \
    -- "${pyjob[@]}" --steps $((v + 10))
  finish 120
  check "python: stopped and resumed equals the uninterrupted run, bit for bit" \
    cmp -s "$work/py-long.npy" "$work/py-resumed.npy"
}

case_scale() {
  printf '%s slots=8\n%s slots=8\n%s slots=8\n%s slots=8\n' "$A" "$B" "$C" "$D" >"$work/hosts4"
  start scale -- --hostfile "$work/hosts4" --base-port "$base_port" --num-ps 4 --num-workers 32 \
    -- "${job[@]}" --steps 5 --batch-size 2 --timeout 120
  finish 300
  expect_exit 0 300
  check "36 processes started" test "$(grep -c '^launch: started ' "$out")" -eq 36
  check "every process exited 0" test "$(grep -c '^launch: .* exited 0$' "$out")" -eq 36
  check "chief reports test_accuracy" out_has "^\[w0@$A\] .*summary: .*test_accuracy="
}

main() {
  case_matches_local
  case_insecure
  case_bind_all
  case_remote_worker_killed
  case_connection_dropped
  case_launcher_killed
  case_unreachable_host
  case_port_taken
  case_allreduce_across_hosts
  case_partition
  case_long_partition
  case_scale
  case_python_workers
  report_and_exit check_ssh_cluster
}

main
