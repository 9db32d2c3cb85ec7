# shellcheck shell=bash
# A real single-node Slurm for the tests: munged, slurmctld and slurmd from Debian, configured
# in a temporary directory (nothing under /etc is touched), on free ports of 127.0.0.1.
# Sourced by tests/cluster/check_slurm_mpi.sh; needs root and the slurmctld, slurmd,
# slurm-client and munge packages.
#
#   source tests/cluster/slurm_node.sh
#   slurm_node_up DIR        # exports SLURM_CONF; sbatch/salloc/srun then use this cluster
#   slurm_node_down          # stops the daemons (idempotent)

declare -ga SLURM_DAEMON_PIDS=()

# Prints why the node cannot run here (empty output: it can).
slurm_node_unavailable() {
  ((EUID == 0)) || { echo "needs root (slurmd runs jobs as any user)"; return; }
  local tool
  for tool in munged slurmctld slurmd sbatch salloc srun sinfo; do
    command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || { echo "needs $tool"; return; }
  done
}

# free_port: a TCP port of 127.0.0.1 that nothing listens on now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

slurm_node_up() {
  local dir=$1 node
  node=$(hostname -s)
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
  head -c 1024 /dev/urandom >"$dir/munge/munge.key" && chmod 600 "$dir/munge/munge.key"
  munged -F -f --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" >"$dir/munged.out" 2>&1 &
  SLURM_DAEMON_PIDS+=("$!")
  cat >"$dir/slurm.conf" <<CONF
ClusterName=pstraintest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$node NodeAddr=127.0.0.1 CPUs=16 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF=$dir/slurm.conf
  local deadline=$((SECONDS + 20))
  until [[ -S $dir/munge/munge.sock ]]; do
    ((SECONDS < deadline)) || { echo "slurm_node: munged did not start:" >&2; cat "$dir/munged.out" >&2; return 1; }
    sleep 0.1
  done
  slurmctld -D -f "$SLURM_CONF" >"$dir/slurmctld.out" 2>&1 &
  SLURM_DAEMON_PIDS+=("$!")
  slurmd -D -f "$SLURM_CONF" >"$dir/slurmd.out" 2>&1 &
  SLURM_DAEMON_PIDS+=("$!")
  # Ready = the node is idle in sinfo (bounded).
  until [[ $(sinfo -h -N -o '%T' 2>/dev/null) == idle ]]; do
    if ((SECONDS >= deadline)); then
      echo "slurm_node: the node did not become idle within 20 s:" >&2
      tail -n 20 "$dir/slurmctld.out" "$dir/slurmd.out" >&2
      return 1
    fi
    sleep 0.2
  done
}

slurm_node_down() {
  local pid
  for pid in "${SLURM_DAEMON_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${SLURM_DAEMON_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  SLURM_DAEMON_PIDS=()
}
