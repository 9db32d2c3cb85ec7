#!/usr/bin/env bash
# Runs one pstrain process on a remote host for launch.sh's ssh starter, and stops it when the
# launcher's connection ends. ssh relays the launcher's pipe to our standard input; it ends when
# the launcher closes it (the job is stopping), when the launcher dies (even by SIGKILL), or when
# the connection drops. Then the process group gets SIGTERM (a second one 0.3 s later), and
# SIGKILL after GRACE seconds.
#
#   remote.sh GRACE COMMAND...      exit status: COMMAND's (128+N when killed by signal N)
set -u
grace=$1
shift
# The launcher's first line: "KEY <secret>" (the job's CURVE key, kept off command lines and
# files on this host) or NOKEY.
IFS= read -r first || exit 2
if [[ $first == KEY\ * ]]; then
  export PSTRAIN_CURVE_SECRET_KEY=${first#KEY }
  unset PSTRAIN_CURVE_KEY_FILE  # a path on the launcher's host
fi
# Every trap is in place before the command and the watcher start: an early end of input (the
# job stopped while this host was still starting) must stop the command, not kill this script.
pid=""
stop() {
  [[ -n $pid ]] || pid=$(jobs -p | head -n 1)  # a signal just after the start, before pid=$!
  [[ -n $pid ]] || return 0
  kill -TERM -- "-$pid" 2>/dev/null || return 0
  local waited=0
  # A second SIGTERM a moment later: a checkpointing chief takes the first as a request for a
  # final checkpoint, the second as "stop now" (worker/main.cc).
  while kill -0 -- "-$pid" 2>/dev/null && ((waited < 3)); do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -TERM -- "-$pid" 2>/dev/null || return 0
  while kill -0 -- "-$pid" 2>/dev/null && ((waited < grace * 10)); do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -KILL -- "-$pid" 2>/dev/null
}
finish() {  # finish STATUS: stops the command, reaps it, exits
  stop
  [[ -n $pid ]] && wait "$pid" 2>/dev/null
  exit "$1"
}
trap 'finish 143' TERM USR1
trap 'finish 129' HUP
# setsid: the command leads its own process group (a background job of a non-interactive shell
# is not a group leader, so setsid execs in place and $! is the command's own pid).
setsid "$@" </dev/null &
pid=$!
# The watcher reads our standard input until it ends: the launcher is stopping or gone. A line
# TERM passes SIGTERM on to the command (a checkpointing job's final checkpoint).
(
  while read -r -u 3 line; do
    [[ $line == TERM ]] && kill -TERM "$pid" 2>/dev/null
  done
  kill -USR1 "$$" 2>/dev/null
) 3<&0 </dev/null >/dev/null 2>&1 &
watcher=$!
wait "$pid"
status=$?
# `wait` also returns when a trapped signal arrives; only a real exit is final.
while kill -0 "$pid" 2>/dev/null; do
  wait "$pid"
  status=$?
done
kill "$watcher" 2>/dev/null
exit "$status"
