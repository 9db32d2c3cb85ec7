#!/usr/bin/env bash
# Stand-in for pstrain-worker in check_launch.sh: same flags (unknown ones ignored), no network.
# Prints a few lines on stdout and stderr, touches DIR/fake_done.<index> (DIR = $FAKE_STATE_DIR,
# else $PSTRAIN_RUN_DIR) so fake_ps.sh can exit, and exits 0; worker 0 ends with a summary line.
# Behaviour by environment:
#   FAKE_FAIL_INDEX=i    worker i exits 3 after its work
#   FAKE_WORKER_REFUSE=1 every worker refuses its flags (exit 2) at once
#   FAKE_HANG=1          every worker hangs, waiting on a child process (tests group kill)
#   FAKE_IGNORE_TERM=1   ...and ignores SIGTERM (tests the launcher's SIGKILL escalation)
#   FAKE_LEAVE_CHILD=1   worker 0 exits 0 but leaves a child process running
#   FAKE_WORK_S=S        seconds of "work" before finishing (default 0.3)
#   FAKE_UNTIL_STOP=1    every worker trains until the job stops: worker 0 takes SIGTERM as the
#                        request for a final checkpoint (touches DIR/fake_stop_asked, as the real
#                        chief marks one), and all finish once the PS wrote it (DIR/fake_stopped)
# --check-config (launch.sh --dry-run): says "configuration OK" and exits 0, or, like the real
# binary, refuses a --frobnicate with exit 2.
index=0 num_ps=1 num_workers=1 ps_hosts="" all_args=("$@") check=0 refuse=""
while (($#)); do
  case $1 in
    --check-config) check=1 ;;
    --frobnicate) refuse=$1 ;;
    --index) index=$2; shift ;;
    --num-ps) num_ps=$2; shift ;;
    --num-workers) num_workers=$2; shift ;;
    --ps-hosts) ps_hosts=$2; shift ;;
  esac
  shift
done
[[ -z $refuse ]] || { echo "fake worker: unrecognised option '$refuse' (see --help)" >&2; exit 2; }
[[ ${FAKE_WORKER_REFUSE:-0} != 1 ]] || { echo "fake worker: a flag only the worker checks is wrong" >&2; exit 2; }
if ((check)); then
  echo "fake worker: configuration OK"
  exit 0
fi
state_dir=${FAKE_STATE_DIR:-${PSTRAIN_RUN_DIR:-}}
[[ -n $state_dir ]] || { echo "fake worker: need FAKE_STATE_DIR or PSTRAIN_RUN_DIR" >&2; exit 2; }

IFS=, read -r -a hosts <<<"$ps_hosts"
if ((${#hosts[@]} != num_ps)); then
  echo "fake w$index: --ps-hosts '$ps_hosts' does not list $num_ps PS" >&2
  exit 2
fi
echo "fake w$index of $num_workers: connecting to ${hosts[*]} (pid $$)" >&2
echo "fake w$index: step 1 loss=2.30"
sleep "${FAKE_WORK_S:-0.3}"

if [[ ${FAKE_HANG:-0} == 1 ]]; then
  [[ ${FAKE_IGNORE_TERM:-0} == 1 ]] && trap '' TERM
  # The child's command line carries this worker's arguments, so a test can find it with pgrep.
  bash -c 'while :; do sleep 1; done' fake_worker_child "${all_args[@]}" &
  child=$!
  [[ ${FAKE_IGNORE_TERM:-0} == 1 ]] || trap 'kill "$child" 2>/dev/null; exit 143' TERM
  echo "fake w$index: hanging (child pid $child)" >&2
  while :; do wait "$child"; done
fi
if [[ ${FAKE_UNTIL_STOP:-0} == 1 ]]; then
  ((index == 0)) && trap 'touch "$state_dir/fake_stop_asked"; echo "fake w0: stop requested: a final checkpoint" >&2' TERM
  echo "fake w$index: training until stopped" >&2
  until [[ -e $state_dir/fake_stopped ]]; do sleep 0.1; done
  echo "fake w$index: stopping after the final checkpoint" >&2
fi
if [[ ${FAKE_FAIL_INDEX-} == "$index" ]]; then
  echo "fake w$index: failing on purpose" >&2
  exit 3
fi
touch "$state_dir/fake_done.$index"
if [[ ${FAKE_LEAVE_CHILD:-0} == 1 ]] && ((index == 0)); then
  bash -c 'while :; do sleep 1; done' fake_worker_child "${all_args[@]}" &
fi
if ((index == 0)); then
  echo "summary: test_accuracy=0.9"
else
  echo "fake w$index: done" >&2
fi
