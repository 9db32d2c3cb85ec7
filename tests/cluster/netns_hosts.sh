# shellcheck shell=bash
# Test "hosts" for the multi-host tests: network namespaces on a bridge, each with its own
# private address and its own OpenSSH server (Debian's openssh-server), with keys made here.
# Sourced by the cluster checks; needs root, iproute2 and openssh-server.
#
#   source tests/cluster/netns_hosts.sh
#   netns_hosts_up DIR COUNT   # sets HOST_ADDRS (one address a host) and PSTRAIN_SSH
#   ...                        # ssh to ${HOST_ADDRS[i]} runs a shell inside host i
#   netns_hosts_down           # kills the sshds, removes namespaces and bridge (idempotent)
#   netns_cut I J / netns_heal I J   # a network partition between hosts I and J (below)
#
# Every name carries this shell's pid, and the subnet 10.215.K.0/24 (K from the pid), so
# concurrent runs do not collide; addresses are only ever used inside this machine.

declare -ga HOST_ADDRS=() NETNS_NAMES=() NETNS_VETHS=() SSHD_PIDS=()
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
    NETNS_VETHS+=("$veth")
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
  SSHD_PIDS=() NETNS_NAMES=() NETNS_VETHS=() HOST_ADDRS=() NETNS_BRIDGE=""
}

# Partitions. netns_cut I J drops every IPv4 packet between host I and host J, both ways; the
# other hosts and this machine (the launcher's ssh sessions) still reach both. The packets are
# dropped at the bridge's end of host I's link, where a cut cable or a firewall between the hosts
# would lose them: both hosts' stacks see them leave and retransmit as over a real network (a
# drop rule on a host's own output fails the send instead: TCP retries that on another schedule,
# and a connect fails at once). The filter is a classic BPF program on tc's clsact hook (iproute2 and the
# kernel's cls_bpf: no iptables or nft needed) and holds once tc returns. netns_heal I J removes
# it and returns once a TCP connection from host I to host J's sshd is made (at most 10 s).
# netns_cut_drops I: the packets host I's cuts have dropped so far.

# Prints why cuts cannot be made here (empty output: they can); after netns_hosts_up.
netns_cut_unavailable() {
  command -v tc >/dev/null || { echo "needs tc (iproute2)"; return; }
  local dev=${NETNS_VETHS[0]:-}
  [[ -n $dev ]] || { echo "no hosts yet (netns_hosts_up first)"; return; }
  if ! tc qdisc add dev "$dev" clsact 2>/dev/null; then
    echo "tc cannot add a clsact qdisc (kernel without sch_ingress?)"
    return
  fi
  tc filter add dev "$dev" ingress pref 1 bpf bytecode "1,6 0 0 0" da 2>/dev/null ||
    echo "tc cannot add a bpf filter (kernel without cls_bpf?)"
  tc qdisc del dev "$dev" clsact
}

# The program: IPv4 (ethertype at byte 12) with source (26) or destination (30) ADDR -> 2
# (TC_ACT_SHOT: drop), anything else -> 0 (pass). The offsets hold on both hooks: cls_bpf sees
# the Ethernet header at ingress too.
netns_cut_bytecode() {
  local a b c d
  IFS=. read -r a b c d <<<"$1"
  local addr=$(((a << 24) | (b << 16) | (c << 8) | d))
  echo "8,40 0 0 12,21 0 4 2048,32 0 0 26,21 3 0 $addr,32 0 0 30,21 1 0 $addr,6 0 0 0,6 0 0 2"
}

netns_cut() {
  local dev=${NETNS_VETHS[$1]} peer=${HOST_ADDRS[$2]} pref=$((10 + $2)) hook prog
  prog=$(netns_cut_bytecode "$peer")
  tc qdisc show dev "$dev" | grep -q '^qdisc clsact' || tc qdisc add dev "$dev" clsact || return 1
  for hook in ingress egress; do
    tc filter add dev "$dev" "$hook" pref "$pref" bpf bytecode "$prog" da || return 1
  done
}

netns_heal() {
  local dev=${NETNS_VETHS[$1]} ns=${NETNS_NAMES[$1]} peer=${HOST_ADDRS[$2]} pref=$((10 + $2)) hook
  for hook in ingress egress; do tc filter del dev "$dev" "$hook" pref "$pref" || return 1; done
  timeout 10 ip netns exec "$ns" bash -c ": </dev/tcp/$peer/22"
}

netns_cut_drops() {
  tc -s qdisc show dev "${NETNS_VETHS[$1]}" | sed -nE '/^qdisc clsact/,/dropped/s/.*\(dropped ([0-9]+),.*/\1/p'
}
