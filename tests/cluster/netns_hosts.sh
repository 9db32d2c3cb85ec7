# shellcheck shell=bash
# Test "hosts" for the multi-host tests: network namespaces on a bridge, each with its own
# private address and its own OpenSSH server (Debian's openssh-server), with keys made here.
# Sourced by the cluster checks; needs root, iproute2 and openssh-server.
#
#   source tests/cluster/netns_hosts.sh
#   netns_hosts_up DIR COUNT   # sets HOST_ADDRS (one address a host) and PSTRAIN_SSH
#   ...                        # ssh to ${HOST_ADDRS[i]} runs a shell inside host i
#   netns_hosts_down           # kills the sshds, removes namespaces and bridge (idempotent)
#
# Every name carries this shell's pid, and the subnet 10.215.K.0/24 (K from the pid), so
# concurrent runs do not collide; addresses are only ever used inside this machine.

declare -ga HOST_ADDRS=() NETNS_NAMES=() SSHD_PIDS=()
declare -g NETNS_BRIDGE="" NETNS_DIR=""

# Prints why the hosts cannot be made here (empty output: they can).
netns_hosts_unavailable() {
  ((EUID == 0)) || { echo "needs root (network namespaces)"; return; }
  local tool
  for tool in ip sshd ssh ssh-keygen; do
    command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || { echo "needs $tool"; return; }
  done
  local probe="pstprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "cannot create network namespaces here (ip netns add failed)"
    return
  fi
  ip netns del "$probe"
}

netns_hosts_up() {
  local dir=$1 count=$2 id=$$ h ns veth addr
  local net="10.215.$((id % 200 + 20))"
  NETNS_DIR=$dir
  NETNS_BRIDGE="pstbr$id"
  mkdir -p "$dir/ssh" /run/sshd
  ssh-keygen -q -t ed25519 -N '' -f "$dir/ssh/client" </dev/null || return 1
  ssh-keygen -q -t ed25519 -N '' -f "$dir/ssh/host" </dev/null || return 1
  cp "$dir/ssh/client.pub" "$dir/ssh/authorized_keys"
  ip link add "$NETNS_BRIDGE" type bridge || return 1
  ip addr add "$net.1/24" dev "$NETNS_BRIDGE" && ip link set "$NETNS_BRIDGE" up || return 1
  for ((h = 0; h < count; h++)); do
    ns="pst$id-h$h" veth="pst$id-v$h" addr="$net.$((10 + h))"
    ip netns add "$ns" || return 1
    NETNS_NAMES+=("$ns")
    ip link add "$veth" type veth peer name eth0 netns "$ns" || return 1
    ip link set "$veth" master "$NETNS_BRIDGE" && ip link set "$veth" up || return 1
    ip -n "$ns" addr add "$addr/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
    cat >"$dir/ssh/sshd-$h.conf" <<CONF
ListenAddress $addr
Port 22
HostKey $dir/ssh/host
AuthorizedKeysFile $dir/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $dir/ssh/sshd-$h.pid
MaxStartups 200
MaxSessions 200
PrintMotd no
LogLevel ERROR
CONF
    ip netns exec "$ns" /usr/sbin/sshd -D -e -f "$dir/ssh/sshd-$h.conf" 2>>"$dir/ssh/sshd-$h.log" &
    SSHD_PIDS+=("$!")
    HOST_ADDRS+=("$addr")
  done
  export PSTRAIN_SSH="ssh -i $dir/ssh/client -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no -o LogLevel=ERROR"
  # Ready = a real login answers (bounded; sshd needs a moment to bind).
  local deadline=$((SECONDS + 20))
  for addr in "${HOST_ADDRS[@]}"; do
    until $PSTRAIN_SSH -o BatchMode=yes -o ConnectTimeout=2 "$addr" true </dev/null 2>/dev/null; do
      if ((SECONDS >= deadline)); then
        echo "netns_hosts: sshd at $addr did not answer within 20 s:" >&2
        cat "$dir"/ssh/sshd-*.log >&2
        return 1
      fi
      sleep 0.2
    done
  done
}

netns_hosts_down() {
  local pid ns
  for pid in "${SSHD_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${SSHD_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  for ns in "${NETNS_NAMES[@]}"; do
    # Anything still running in the namespace (a survivor would be a test failure, reported
    # by the checks before this) is killed so the namespace can go.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  [[ -n $NETNS_BRIDGE ]] && ip link del "$NETNS_BRIDGE" 2>/dev/null
  SSHD_PIDS=() NETNS_NAMES=() HOST_ADDRS=() NETNS_BRIDGE=""
}
