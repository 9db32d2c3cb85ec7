#!/usr/bin/env bash
# Runs a pstrain job on this machine: S parameter servers (PS) and N workers, started in order,
# watched together and stopped together, with one exit code. With no arguments it builds pstrain
# and runs the default job (configs/fashion_mlp.cfg). See --help and docs/operations.md.
#
# How processes are tracked: every process is started in the background with `setsid`, so its
# pid ($!) is the real binary's pid and also the id of its own process group. Its stdout and
# stderr go to a pipe read by a `sed -u` (a process substitution of this shell), which writes the
# log file and the "[name] " prefixed copy; the prefixer never sits between this shell and the
# binary, so `wait PID` returns the binary's own exit status. Stopping = SIGTERM to each
# process group, SIGKILL after a grace period. setpriv's parent-death signal covers the case
# where this script itself is SIGKILLed.
# shellcheck source-path=SCRIPTDIR
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly REPO

# Exit codes (also in docs/operations.md).
readonly EXIT_OK=0 EXIT_FAILED=1 EXIT_USAGE=2 EXIT_SETUP=3 EXIT_START=4

usage() {
  cat <<EOF
usage: launch/launch.sh [options] [-- job flags for every process]

Runs S parameter servers and N workers of pstrain on this machine, prefixes and logs their
output, stops all of them as soon as one fails, and exits with one status.

options:
  --num-ps S        parameter-server shards (default: num-ps in the config file, else 1)
  --num-workers N   workers (default: num-workers in the config file, else 1)
  --config FILE     job config, passed to every process as --config FILE
                    (default: configs/fashion_mlp.cfg, the Fashion-MNIST MLP job)
  --base-port P     PS s listens on port P+s (default: each PS picks a free port itself
                    and reports it through RUNDIR/ps<s>.addr)
  --bind ADDR       address the PS processes bind (default: the binaries' 127.0.0.1)
  --transport T     how workers reach the PS: ipc (Unix-domain sockets in Linux's abstract
                    namespace; the default, as every process runs on this host) or tcp (the
                    PS's TCP address). The PS listens on TCP either way.
  --run-dir DIR     where logs, addresses and cmd.txt go (default: runs/<date>-<time>-<pid>)
  --no-setup        do not install packages or build (same as PSTRAIN_NO_SETUP=1)
  -h, --help        this help
  -- FLAGS...       passed unchanged to every process, e.g. -- --lr 0.05 --steps 200

environment:
  PSTRAIN_BUILD_DIR       build directory (default: <repo>/build)
  PSTRAIN_PS_BIN          PS binary (default: \$PSTRAIN_BUILD_DIR/pstrain-ps)
  PSTRAIN_WORKER_BIN      worker binary (default: \$PSTRAIN_BUILD_DIR/pstrain-worker)
  PSTRAIN_NO_SETUP=1      same as --no-setup
  PSTRAIN_NO_INSTALL=1    build but do not check or install packages
  PSTRAIN_START_TIMEOUT   seconds to wait for every PS to report its address (default 60)
  PSTRAIN_PS_EXIT_TIMEOUT seconds the PS may take to exit after the last worker (default 30)
  PSTRAIN_STOP_GRACE      seconds between SIGTERM and SIGKILL when stopping (default 5)

exit status: 0 all processes exited 0; 1 a process failed (it is named) or a PS did not exit;
2 usage error; 3 setup or build failed; 4 a PS did not start in time; 129/130/143 stopped by
SIGHUP/SIGINT/SIGTERM.
EOF
}

# ---------------------------------------------------------------- command line and settings

num_ps="" num_workers="" config="" base_port="" bind="" run_dir="" mode="" transport=ipc
no_setup=${PSTRAIN_NO_SETUP:-0}
extra=()

usage_error() {
  printf 'launch: %s (see launch/launch.sh --help)\n' "$1" >&2
  exit "$EXIT_USAGE"
}

parse_args() {
  local flag value
  while (($#)); do
    flag=$1
    case $flag in
      -h | --help) usage; exit "$EXIT_OK" ;;
      --no-setup) no_setup=1; shift; continue ;;
      --) shift; extra=("$@"); return ;;
      --*=*) value=${flag#*=}; flag=${flag%%=*}; shift ;;
      --num-ps | --num-workers | --config | --base-port | --bind | --run-dir | --transport)
        (($# >= 2)) || usage_error "$flag needs a value"
        value=$2; shift 2 ;;
      *) usage_error "unknown flag '$flag' (job flags go after --, e.g. -- --lr 0.01)" ;;
    esac
    case $flag in
      --num-ps) num_ps=$value ;;
      --num-workers) num_workers=$value ;;
      --config) config=$value ;;
      --base-port) base_port=$value ;;
      --bind) bind=$value ;;
      --run-dir) run_dir=$value ;;
      --transport)
        [[ $value == ipc || $value == tcp ]] || usage_error "--transport: '$value' is not ipc or tcp"
        transport=$value ;;
      *) usage_error "unknown flag '$flag'" ;;
    esac
  done
}

# Prints the value of `key = value` in a Boost.Program_options config file ('#' starts a comment).
config_value() {
  awk -v key="$1" '
    { sub(/#.*/, "") }
    index($0, "=") {
      k = substr($0, 1, index($0, "=") - 1); v = substr($0, index($0, "=") + 1)
      gsub(/^[ \t]+|[ \t\r]+$/, "", k); gsub(/^[ \t]+|[ \t\r]+$/, "", v)
      if (k == key) found = v
    }
    END { if (found != "") print found }' "$2"
}

absolute_path() {
  printf '%s/%s\n' "$(cd "$(dirname "$1")" && pwd)" "$(basename "$1")"
}

resolve_config() {
  if [[ -z $config ]]; then
    config=$REPO/configs/fashion_mlp.cfg
  elif [[ ! -f $config && $config != /* && -f $REPO/$config ]]; then
    config=$REPO/$config
  fi
  [[ -f $config ]] || usage_error "config file not found: $config"
  config=$(absolute_path "$config")
}

# require_int NAME VALUE MIN [MAX]
require_int() {
  if [[ ! $2 =~ ^[0-9]+$ ]] || ((10#$2 < $3)) || (($# == 4 && 10#$2 > ${4:-0})); then
    usage_error "$1 must be an integer >= $3${4:+ and <= $4}, got '$2'"
  fi
}

# The job's --mode: from the flags after --, else the config file, else sync.
resolve_mode() {
  local i
  for ((i = 0; i < ${#extra[@]}; i++)); do
    case ${extra[i]} in
      --mode) mode=${extra[i + 1]:-} ;;
      --mode=*) mode=${extra[i]#--mode=} ;;
    esac
  done
  : "${mode:=$(config_value mode "$config")}" "${mode:=sync}"
}

resolve_settings() {
  resolve_config
  resolve_mode
  : "${num_ps:=$(config_value num-ps "$config")}" "${num_ps:=1}"
  : "${num_workers:=$(config_value num-workers "$config")}" "${num_workers:=1}"
  require_int --num-ps "$num_ps" 1
  [[ $mode == allreduce ]] && num_ps=0  # the workers all-reduce among themselves: no PS
  require_int --num-workers "$num_workers" 1
  if [[ -n $base_port ]]; then
    require_int --base-port "$base_port" 1 $((65536 - (num_ps > 0 ? num_ps : 1)))
  fi
  start_timeout=${PSTRAIN_START_TIMEOUT:-60}
  ps_exit_timeout=${PSTRAIN_PS_EXIT_TIMEOUT:-30}
  stop_grace=${PSTRAIN_STOP_GRACE:-5}
  require_int PSTRAIN_START_TIMEOUT "$start_timeout" 1
  require_int PSTRAIN_PS_EXIT_TIMEOUT "$ps_exit_timeout" 0
  require_int PSTRAIN_STOP_GRACE "$stop_grace" 0
  build_dir=${PSTRAIN_BUILD_DIR:-$REPO/build}
  ps_bin=${PSTRAIN_PS_BIN:-$build_dir/pstrain-ps}
  worker_bin=${PSTRAIN_WORKER_BIN:-$build_dir/pstrain-worker}
}

make_run_dir() {
  : "${run_dir:=$REPO/runs/$(date +%Y%m%d-%H%M%S)-$$}"
  mkdir -p "$run_dir" || usage_error "cannot create run directory $run_dir"
  run_dir=$(cd "$run_dir" && pwd)
  export PSTRAIN_RUN_DIR=$run_dir
  rm -f "$run_dir"/ps[0-9]*.addr "$run_dir"/ps[0-9]*.log "$run_dir"/w[0-9]*.log \
    "$run_dir/cmd.txt" "$run_dir/launch.log"
}

# ---------------------------------------------------------------- messages and time

# Prints "launch: MSG" and appends it, timestamped, to RUNDIR/launch.log.
say() {
  printf 'launch: %s\n' "$*"
  [[ -n $run_dir ]] && printf '%(%F %T)T %s\n' -1 "$*" >>"$run_dir/launch.log"
}

# Sets $now to the current time in milliseconds (no subprocess).
clock() {
  local us=${EPOCHREALTIME//[!0-9]/}
  now=$((10#$us / 1000))
}

# Sleeps 0.1 s on a pipe that never becomes readable; trapped signals interrupt it at once.
tick() {
  read -r -t 0.1 -u "$tick_fd" _
}

describe_status() {
  local st=$1
  if ((st > 128 && st <= 128 + 64)); then
    printf 'killed by signal %d (SIG%s)' $((st - 128)) "$(kill -l $((st - 128)) 2>/dev/null)"
  else
    printf 'exited with status %d' "$st"
  fi
}

# ---------------------------------------------------------------- processes

declare -A pid_of=()       # name -> pid (= process group id) of every process started
declare -A live=()         # name -> pid of processes not yet reaped
declare -a order=()        # names in start order
declare -a prefixers=()    # pids of the output prefixers
stopping=0 workers_left=0 tick_fd="" wrap=() running=()

# Children get default SIGINT/SIGQUIT back (background jobs of a script have them ignored) and
# SIGTERM when this shell dies, where the tools for that exist.
init_wrapper() {
  if env --default-signal=INT,QUIT true 2>/dev/null; then
    wrap+=(env '--default-signal=INT,QUIT')
  fi
  if setpriv --pdeathsig TERM -- true 2>/dev/null; then
    wrap+=(setpriv --pdeathsig TERM --)
  fi
}

# spawn NAME COMMAND...: starts COMMAND in its own process group; output prefixed and logged.
spawn() {
  local name=$1 out_fd pid quoted
  shift
  exec {out_fd}> >(exec sed -u -e "w $run_dir/$name.log" -e "s/^/[$name] /")
  prefixers+=("$!")
  setsid "${wrap[@]}" "$@" </dev/null >&"$out_fd" 2>&1 &
  pid=$!
  exec {out_fd}>&-
  pid_of[$name]=$pid
  live[$name]=$pid
  order+=("$name")
  printf -v quoted '%q ' "$@"
  printf '%s\t%s\t%s\n' "$name" "$pid" "${quoted% }" >>"$run_dir/cmd.txt"
  say "started $name (pid $pid)"
}

alive() {
  kill -0 "$1" 2>/dev/null
}

# Sets `running` to the names of processes whose process group still has a member that is not
# a zombie (an orphaned zombie waits for init, which in a container may never reap it).
find_running() {
  running=()
  local -A want=() seen=()
  local name f line pgrp
  local -a fields
  for name in "${!pid_of[@]}"; do
    kill -0 -- "-${pid_of[$name]}" 2>/dev/null && want[${pid_of[$name]}]=$name
  done
  ((${#want[@]})) || return 1
  if [[ ! -d /proc/self ]]; then
    running=("${want[@]}")
    return 0
  fi
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null <"$f" || continue
    read -r -a fields <<<"${line##*) }"  # state ppid pgrp ...
    pgrp=${fields[2]}
    [[ ${fields[0]} != Z && -n ${want[$pgrp]-} && -z ${seen[$pgrp]-} ]] || continue
    seen[$pgrp]=1
    running+=("${want[$pgrp]}")
  done
  ((${#running[@]}))
}

signal_groups() {
  local pid
  for pid in "${pid_of[@]}"; do
    kill "-$1" -- "-$pid" 2>/dev/null
  done
}

# Waits up to 2 s for the prefixers to print the last lines, then ends any that are stuck.
drain_output() {
  local pid deadline
  clock; deadline=$((now + 2000))
  for pid in "${prefixers[@]}"; do
    while alive "$pid" && clock && ((now < deadline)); do tick; done
    kill -KILL "$pid" 2>/dev/null
  done
  prefixers=()
}

# SIGTERM to every process group, SIGKILL to those left after the grace period, then reap.
stop_all() {
  ((${#pid_of[@]})) || return 0
  stopping=1
  local deadline name
  signal_groups TERM
  clock; deadline=$((now + stop_grace * 1000))
  while find_running && clock && ((now < deadline)); do tick; done
  if find_running; then
    say "${running[*]} still running ${stop_grace}s after SIGTERM; sending SIGKILL"
    signal_groups KILL
    clock; deadline=$((now + 2000))
    while find_running && clock && ((now < deadline)); do tick; done
  fi
  for name in "${!live[@]}"; do
    wait "${live[$name]}" 2>/dev/null
  done
  live=() pid_of=()
  drain_output
}

# fail MESSAGE CODE: names the problem, stops everything, exits.
fail() {
  say "$1; stopping all"
  stop_all
  say "stopped; logs in $run_dir"
  exit "$2"
}

# shellcheck disable=SC2317  # invoked by the traps in main
on_signal() {
  if ((stopping)); then  # a second signal while stopping: no more grace
    signal_groups KILL
    exit "$2"
  fi
  fail "received SIG$1" "$2"
}

# Reaps every process that has exited. Non-zero status: stop everything. $1 = phase.
reap_exited() {
  local name pid st
  for name in "${order[@]}"; do
    pid=${live[$name]-}
    if [[ -z $pid ]] || alive "$pid"; then
      continue
    fi
    wait "$pid"
    st=$?
    unset "live[$name]"
    if ((st != 0)); then
      fail "$name (pid $pid) died: $(describe_status "$st")" "$EXIT_FAILED"
    fi
    if [[ $1 == start && $name == ps* ]]; then
      fail "$name (pid $pid) exited with status 0 before reporting its address" "$EXIT_START"
    fi
    say "$name exited 0"
    [[ $name == w* ]] && ((workers_left--))
  done
}

# ---------------------------------------------------------------- phases

setup() {
  if [[ $no_setup == 1 ]]; then
    say "setup skipped (--no-setup / PSTRAIN_NO_SETUP=1)"
    return
  fi
  # shellcheck source=setup.sh
  source "$REPO/launch/setup.sh"
  pstrain_setup </dev/null || { say "setup failed"; exit "$EXIT_SETUP"; }
}

check_binaries() {
  local bin
  for bin in "$ps_bin" "$worker_bin"; do
    [[ -x $bin && -f $bin ]] && continue
    printf 'launch: %s is missing or not executable; build it (run without --no-setup)%s\n' \
      "$bin" " or set PSTRAIN_BUILD_DIR / PSTRAIN_PS_BIN / PSTRAIN_WORKER_BIN" >&2
    exit "$EXIT_SETUP"
  done
}

start_ps() {
  local s port
  local -a cmd
  for ((s = 0; s < num_ps; s++)); do
    port=0
    [[ -n $base_port ]] && port=$((base_port + s))
    cmd=("$ps_bin" --config "$config" --index "$s" --num-ps "$num_ps" --num-workers "$num_workers"
         --port "$port" --port-file "$run_dir/ps$s.addr")
    [[ -n $bind ]] && cmd+=(--bind "$bind")
    [[ $transport == ipc ]] && cmd+=(--ipc "$(ipc_name "$s")")
    spawn "ps$s" "${cmd[@]}" "${extra[@]}"
  done
}

# Reads RUNDIR/<name>.addr; a wildcard bind address is reached through loopback.
read_address() {
  local addr host
  read -r addr <"$run_dir/$1.addr"
  host=${addr%:*}
  case $host in 0.0.0.0 | '*' | '' | '[::]' | ::) host=127.0.0.1 ;; esac
  printf '%s:%s\n' "$host" "${addr##*:}"
}

# Waits until each named process has written RUNDIR/<name>.addr; sets addr_of[name].
declare -A addr_of=()
wait_for_addresses() {
  local name deadline
  local -A pending=()
  for name in "$@"; do
    say "waiting for $name..."
    pending[$name]=1
  done
  clock; deadline=$((now + start_timeout * 1000))
  while ((${#pending[@]})); do
    for name in "${!pending[@]}"; do
      [[ -s $run_dir/$name.addr ]] || continue
      addr_of[$name]=$(read_address "$name")
      say "$name ready at ${addr_of[$name]}"
      unset "pending[$name]"
    done
    ((${#pending[@]})) || break
    reap_exited start
    clock
    ((now < deadline)) ||
      fail "${!pending[*]} did not report an address within ${start_timeout}s" "$EXIT_START"
    tick
  done
}

# The Unix-domain socket of PS s: abstract (no file), unique while this launcher lives.
ipc_name() { printf '@pstrain-%s-ps%s' "$$" "$1"; }

# Sets ps_hosts: every PS's address, comma-separated, in shard order (ipc:// with --transport
# ipc; the PS has bound it before it writes its TCP address).
wait_for_ps() {
  local s
  local -a names=() addrs=()
  for ((s = 0; s < num_ps; s++)); do names+=("ps$s"); done
  wait_for_addresses "${names[@]}"
  for ((s = 0; s < num_ps; s++)); do
    if [[ $transport == ipc ]]; then addrs+=("ipc://$(ipc_name "$s")"); else addrs+=("${addr_of[ps$s]}"); fi
  done
  ps_hosts=$(IFS=,; printf '%s' "${addrs[*]}")
}

start_workers() {
  local i
  for ((i = 0; i < num_workers; i++)); do
    spawn "w$i" "$worker_bin" --config "$config" --index "$i" --num-ps "$num_ps" \
      --num-workers "$num_workers" --ps-hosts "$ps_hosts" "${extra[@]}"
  done
  workers_left=$num_workers
}

# allreduce mode: worker 0 is the ring's rendezvous (on --base-port, else a free port it reports
# in RUNDIR/w0.addr); the others join it there.
start_ring_workers() {
  local i
  local -a common=(--config "$config" --num-workers "$num_workers")
  [[ -n $bind ]] && common+=(--bind "$bind")
  spawn w0 "$worker_bin" "${common[@]}" --index 0 --coordinator "${bind:-127.0.0.1}:${base_port:-0}" \
    --port-file "$run_dir/w0.addr" "${extra[@]}"
  if ((num_workers > 1)); then
    wait_for_addresses w0
    for ((i = 1; i < num_workers; i++)); do
      spawn "w$i" "$worker_bin" "${common[@]}" --index "$i" --coordinator "${addr_of[w0]}" "${extra[@]}"
    done
  fi
  workers_left=$num_workers
}

# Waits for every process; after the last worker, gives the PS ps_exit_timeout to exit.
supervise() {
  local deadline=0
  while ((${#live[@]})); do
    reap_exited run
    ((${#live[@]})) || break
    if ((workers_left == 0 && deadline == 0)); then
      say "all workers finished; waiting for the PS to exit"
      clock; deadline=$((now + ps_exit_timeout * 1000))
    fi
    clock
    ((deadline == 0 || now < deadline)) ||
      fail "${!live[*]} still running ${ps_exit_timeout}s after the workers finished" "$EXIT_FAILED"
    tick
  done
  if find_running; then
    say "${running[*]} left processes behind; stopping them"
    stop_all
  fi
  live=() pid_of=()
  drain_output
}

main() {
  parse_args "$@"
  resolve_settings
  make_run_dir
  say "run directory $run_dir"
  trap 'on_signal INT 130' INT
  trap 'on_signal TERM 143' TERM
  trap 'on_signal HUP 129' HUP
  trap 'stop_all' EXIT
  setup
  check_binaries
  init_wrapper
  exec {tick_fd}<> <(:)
  # Bash reports children killed by a signal on stderr ("line N: PID Killed ..."); this script
  # reports them itself, so those lines are dropped and everything else passes through.
  exec 2> >(exec sed -u -E '/: line [0-9]+: +[0-9]+ /d' >&2)
  say "config $config; mode $mode; $num_ps PS, $num_workers workers${extra[*]:+; job flags: ${extra[*]}}"
  if [[ $mode == allreduce ]]; then
    start_ring_workers
  else
    start_ps
    wait_for_ps
    start_workers
  fi
  supervise
  say "training completed; logs in $run_dir"
  exit "$EXIT_OK"
}

main "$@"
