#!/usr/bin/env bash
# Stand-in for pstrain-ps in check_launch.sh: same flags (unknown ones ignored), no network.
# Writes "127.0.0.1:<port>" to --port-file (temp + rename), then, like the real PS, exits 0 on its
# own once every worker has said it is done (fake_worker.sh touches DIR/fake_done.<index>,
# DIR = $FAKE_STATE_DIR, else $PSTRAIN_RUN_DIR). Behaviour by environment:
#   FAKE_PS_FAIL_INDEX=s  PS s exits 2 before reporting its address
#   FAKE_PS_NO_ADDR=1     never report an address (start-up timeout)
#   FAKE_PS_LINGER=1      never exit on its own (the "PS never exits" bug)
#   FAKE_PS_MAX_S=S       give up with status 1 after S seconds (default 120; a safety net)
#   FAKE_PS_SAVE_S=S      once the workers are done, "save" for S seconds, saying so every second,
#                         then exit 0 (a PS writing large tables at the job's end)
#   FAKE_PS_SAVE_S with FAKE_UNTIL_STOP=1 (fake_worker.sh): once worker 0 asked for a final
#                         checkpoint, "write" it for S seconds, saying so every second, then let
#                         the workers finish (DIR/fake_stopped)
# --check-config (launch.sh --dry-run): says "configuration OK" and exits 0, or, like the real
# binary, refuses a --frobnicate with exit 2.
index=0 num_workers=1 port=0 port_file="" check=0 refuse=""
while (($#)); do
  case $1 in
    --check-config) check=1 ;;
    --frobnicate) refuse=$1 ;;
    --index) index=$2; shift ;;
    --num-workers) num_workers=$2; shift ;;
    --port) port=$2; shift ;;
    --port-file) port_file=$2; shift ;;
  esac
  shift
done
[[ -z $refuse ]] || { echo "fake ps: unrecognised option '$refuse' (see --help)" >&2; exit 2; }
if ((check)); then
  echo "fake ps: configuration OK"
  exit 0
fi
state_dir=${FAKE_STATE_DIR:-${PSTRAIN_RUN_DIR:-}}
if [[ -z $state_dir || -z $port_file ]]; then
  echo "fake ps: need FAKE_STATE_DIR or PSTRAIN_RUN_DIR, and --port-file" >&2
  exit 2
fi

trap 'echo "fake ps$index: SIGTERM, exiting" >&2; exit 143' TERM
echo "fake ps$index: starting (pid $$)" >&2
if [[ ${FAKE_PS_FAIL_INDEX-} == "$index" ]]; then
  echo "fake ps$index: failing on purpose" >&2
  exit 3
fi
((port != 0)) || port=$((20000 + RANDOM % 20000))
if [[ ${FAKE_PS_NO_ADDR:-0} != 1 ]]; then
  sleep 0.2  # binding takes a moment; the launcher must wait for the file
  echo "127.0.0.1:$port" >"$port_file.tmp" && mv "$port_file.tmp" "$port_file"
  echo "fake ps$index: listening on 127.0.0.1:$port"
fi
deadline=$((SECONDS + ${FAKE_PS_MAX_S:-120}))
while ((SECONDS < deadline)); do
  done_files=("$state_dir"/fake_done.*)
  [[ -e ${done_files[0]} ]] || done_files=()
  if [[ -e $state_dir/fake_stop_asked && ! -e $state_dir/fake_stopped ]]; then
    for ((i = 1; i <= ${FAKE_PS_SAVE_S:-0}; i++)); do
      echo "fake ps$index: saving checkpoint of version 7 to /fake: $i of ${FAKE_PS_SAVE_S} MiB"
      sleep 1
    done
    touch "$state_dir/fake_stopped"
  fi
  if [[ ${FAKE_PS_LINGER:-0} != 1 ]] && ((${#done_files[@]} >= num_workers)); then
    # A stopped job's PS writes no --save-params tables.
    [[ -e $state_dir/fake_stopped ]] || for ((i = 1; i <= ${FAKE_PS_SAVE_S:-0}; i++)); do
      echo "fake ps$index: saving embedding tables to /fake: $i of ${FAKE_PS_SAVE_S} MiB"
      sleep 1
    done
    echo "fake ps$index: all $num_workers workers done; exiting" >&2
    exit 0
  fi
  sleep 0.1
done
echo "fake ps$index: gave up after ${FAKE_PS_MAX_S:-120}s" >&2
exit 1
