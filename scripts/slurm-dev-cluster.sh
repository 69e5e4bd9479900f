#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for development and CI: one node, or N nodes.
#
#   scripts/slurm-dev-cluster.sh start [--nodes N]
#                                    install (if needed) and start munge, mariadb, slurmdbd,
#                                    slurmctld and N slurmd with CLEAN state (no old jobs, empty
#                                    spool, fresh accounting DB); idempotent (a cluster already up
#                                    with N nodes is left alone; another N is restarted).
#   scripts/slurm-dev-cluster.sh stop     stop every daemon and remove every namespace, veth,
#                                         bridge and mount this script made; idempotent.
#   scripts/slurm-dev-cluster.sh status   print what is up; exit 0 only if the cluster takes jobs.
#   scripts/slurm-dev-cluster.sh node-down I   node n<I> lost: SIGKILL everything in it (N >= 2).
#   scripts/slurm-dev-cluster.sh node-up I     start n<I>'s slurmd again.
#
# N = 1 (default): node `localhost` on 127.0.0.1, no namespaces (works wherever root works).
# N >= 2: node n<i> is a real slurmd in its own network + UTS + mount namespace, joined by a veth
# pair to a private bridge (198.18.0.0/24, a reserved benchmarking range): controller 198.18.0.1,
# n<i> 198.18.0.<10+i>. Addresses exist only on that bridge and inside our namespaces; the
# namespaces have no default route, nothing is forwarded or NATed, so a node reaches the controller
# and its peers and nothing else. Each node sees a bind-mounted /etc/hosts naming n1..nN, so
# MASTER_ADDR=n1 resolves and gloo finds its own address, as on a real cluster. Where namespaces
# cannot be created (not root, no CAP_NET_ADMIN/CAP_SYS_ADMIN) `start` exits 3 with the reason.
#
# Why this shape: CI machines (Debian 12, root, no systemd) have no Slurm; the launcher must be
# tested against the real thing (sbatch, sacct, scontrol requeue), not a mock. Every probe is capped
# with `timeout` because a half-dead daemon makes munge/scontrol retry for minutes, and a killed
# daemon may linger as a zombie (PID 1 reaps late), so state Z counts as dead.
#
# Environment:
#   SLURM_DEV_CPUS        CPUs advertised per node (default: max(4, nproc)) — config_overrides
#                         lets a 2-core box run a pair of 1-CPU jobs plus a 2-task job side by side.
#   SLURM_DEV_ACCOUNTING  1 (default) to run mariadb + slurmdbd so sacct works; 0 to skip them.
#   SLURM_DEV_NO_INSTALL  1 to fail instead of installing missing packages.
set -euo pipefail

CONF_DIR=/etc/slurm
CLUSTER=ci
DB_PASS=slurmci
ACCOUNTING=${SLURM_DEV_ACCOUNTING:-1}
LOG_DIR=/var/log/slurm
STATE_DIR=/var/lib/slurm/slurmctld
SPOOL_DIR=/var/lib/slurm/slurmd
# Multi-node layout (see the header). Names are ours alone so `stop` never touches anything else.
NET_DIR=/run/olmoablate-slurm       # per-node hosts file, slurmd pid files, what start created
BRIDGE=oaslurm0
NS_PREFIX=oaslurm-n                 # network namespace of node n<i>: oaslurm-n<i>
VETH_PREFIX=oaslurmv                # root-side end of node n<i>'s veth pair: oaslurmv<i>
SUBNET=198.18.0
CTL_ADDR=$SUBNET.1
NODES=1

die() { echo "slurm-dev-cluster: error: $*" >&2; exit 1; }
# Exit 3 = this machine cannot host the requested cluster (tests skip with this line as reason).
cannot() { echo "slurm-dev-cluster: cannot run here: $*" >&2; exit 3; }
log() { echo "slurm-dev-cluster: $*" >&2; }

[[ $(id -u) -eq 0 ]] || cannot "must run as root (it installs packages, starts system daemons and creates network namespaces)"

# pid_alive PIDFILE -> 0 if the process in PIDFILE exists and is not a zombie.
pid_alive() {
    local f=$1 pid state
    [[ -s $f ]] || return 1
    pid=$(tr -dc '0-9' <"$f")
    [[ -n $pid && -r /proc/$pid/stat ]] || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo X)
    [[ $state != Z && $state != X ]]
}

# stop_pidfile PIDFILE NAME: TERM, wait up to 10 s, then KILL. Zombies count as gone.
stop_pidfile() {
    local f=$1 name=$2 pid i
    if pid_alive "$f"; then
        pid=$(tr -dc '0-9' <"$f")
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do pid_alive "$f" || break; sleep 0.2; done
        if pid_alive "$f"; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
        log "stopped $name (pid $pid)"
    fi
    rm -f "$f"
}

# wait_for SECONDS CMD...: retry CMD (each try capped at 5 s) until it succeeds.
wait_for() {
    local secs=$1; shift
    local deadline=$((SECONDS + secs))
    while ((SECONDS < deadline)); do
        if timeout 5 "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    return 1
}

install_packages() {
    local pkgs=(munge slurm-client slurmctld slurmd)
    ((NODES > 1)) && pkgs+=(iproute2 util-linux)
    [[ $ACCOUNTING == 1 ]] && pkgs+=(slurmdbd mariadb-server slurm-wlm-mysql-plugin)
    local missing=()
    local p
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    [[ ${SLURM_DEV_NO_INSTALL:-0} == 1 ]] && die "missing packages: ${missing[*]} (SLURM_DEV_NO_INSTALL=1)"
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get update -qq || die "apt-get update failed"
    timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
}

write_config() {
    local cpus mem_kb real_mem acct_type
    cpus=${SLURM_DEV_CPUS:-$(($(nproc) > 4 ? $(nproc) : 4))}
    mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    real_mem=$((mem_kb * 8 / 10 / 1024))  # 80 % of MemTotal in MiB; more would drain the node
    acct_type=accounting_storage/none
    [[ $ACCOUNTING == 1 ]] && acct_type=accounting_storage/slurmdbd
    local ctl_host=localhost acct_host=localhost spool=$SPOOL_DIR pidfile=/run/slurmd.pid
    local slurmd_log=$LOG_DIR/slurmd.log nodes partition_nodes=localhost i
    nodes="NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$cpus RealMemory=$real_mem State=UNKNOWN"
    if ((NODES > 1)); then
        # Inside a node `localhost` is the node itself: name the controller by its bridge address.
        ctl_host="$(hostname -s)($CTL_ADDR)"
        acct_host=$CTL_ADDR
        spool=$SPOOL_DIR/%n
        pidfile=$NET_DIR/slurmd-%n.pid
        slurmd_log=$LOG_DIR/slurmd-%n.log
        partition_nodes="n[1-$NODES]"
        nodes=""
        for i in $(seq 1 "$NODES"); do
            ((i > 1)) && nodes+=$'\n'
            nodes+="NodeName=n$i NodeHostname=n$i NodeAddr=$SUBNET.$((10 + i)) CPUs=$cpus RealMemory=$((real_mem / NODES)) State=UNKNOWN"
        done
    fi
    mkdir -p "$CONF_DIR"
    cat >"$CONF_DIR/slurm.conf.tmp" <<EOF
# Written by olmoablate scripts/slurm-dev-cluster.sh — a $NODES-node dev/CI cluster.
ClusterName=$CLUSTER
SlurmctldHost=$ctl_host
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$spool
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=$pidfile
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$slurmd_log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SchedulerType=sched/backfill
# Requeued jobs become eligible after cred_expire; without a short backfill interval they would
# wait for the next 30 s pass.
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
SlurmctldTimeout=30
InactiveLimit=0
# Slurm's default: a cancelled job gets SIGTERM and 30 s to save its checkpoint before SIGKILL.
KillWait=30
MinJobAge=300
Waittime=0
AccountingStorageType=$acct_type
AccountingStorageHost=$acct_host
AccountingStoragePort=6819
$nodes
PartitionName=debug Nodes=$partition_nodes Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF_DIR/slurm.conf.tmp" "$CONF_DIR/slurm.conf"
    chmod 0644 "$CONF_DIR/slurm.conf"
    if [[ $ACCOUNTING == 1 ]]; then
        cat >"$CONF_DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
LogFile=$LOG_DIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
        chown slurm:slurm "$CONF_DIR/slurmdbd.conf"
        chmod 0600 "$CONF_DIR/slurmdbd.conf"  # slurmdbd refuses a readable config
    fi
}

start_munge() {
    install -d -o munge -g munge -m 0755 /run/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key >/dev/null 2>&1 \
            || mungekey --create --keyfile=/etc/munge/munge.key
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    if ! pid_alive /run/munge/munged.pid; then
        rm -f /run/munge/munged.pid /run/munge/munge.socket.2*
        runuser -u munge -- /usr/sbin/munged || die "munged did not start"
    fi
    wait_for 15 bash -c 'munge -n | unmunge' || die "munge does not answer (munge -n | unmunge)"
}

start_mariadb() {
    install -d -o mysql -g mysql /run/mysqld
    if ! pid_alive /run/mysqld/mysqld.pid; then
        rm -f /run/mysqld/mysqld.pid /run/mysqld/mysqld.sock
        nohup /usr/sbin/mariadbd --user=mysql --datadir=/var/lib/mysql \
            --pid-file=/run/mysqld/mysqld.pid --socket=/run/mysqld/mysqld.sock \
            --skip-networking --skip-log-bin --innodb-buffer-pool-size=64M \
            >>"$LOG_DIR/mariadb.log" 2>&1 </dev/null &
        disown || true
    fi
    wait_for 30 mariadb -e "SELECT 1" || die "mariadb does not answer (see $LOG_DIR/mariadb.log)"
}

# Clean accounting state: drop the DB so job ids of a fresh slurmctld never collide in sacct.
reset_accounting_db() {
    timeout 30 mariadb -e "DROP DATABASE IF EXISTS slurm_acct_db; CREATE DATABASE slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
        ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;" \
        || die "could not reset the accounting database"
}

start_slurmdbd() {
    /usr/sbin/slurmdbd || die "slurmdbd did not start (see $LOG_DIR/slurmdbd.log)"
    wait_for 30 sacctmgr -n list cluster || die "slurmdbd does not answer (see $LOG_DIR/slurmdbd.log)"
    timeout 10 sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
}

# node_names -> the node names of the requested layout.
node_names() {
    if ((NODES > 1)); then seq -f 'n%g' 1 "$NODES"; else echo localhost; fi
}

slurmd_pidfile() {  # slurmd_pidfile NODE
    if [[ $1 == localhost ]]; then echo /run/slurmd.pid; else echo "$NET_DIR/slurmd-$1.pid"; fi
}

# nodes_ready: sinfo lists exactly the requested nodes, each able to take jobs.
nodes_ready() {
    local want have
    want=$(node_names | sort | tr '\n' ' ')
    have=$(timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null \
        | awk '$2 ~ /^(idle|mixed|allocated|completing)/ {print $1}' | sort -u | tr '\n' ' ')
    [[ -n $have && $have == "$want" ]]
}

cluster_up() {
    local n
    pid_alive /run/slurmctld.pid || return 1
    for n in $(node_names); do pid_alive "$(slurmd_pidfile "$n")" || return 1; done
    nodes_ready || return 1
    if [[ $ACCOUNTING == 1 ]]; then
        pid_alive /run/slurmdbd.pid || return 1
        timeout 5 sacct -n -X -S now >/dev/null 2>&1 || return 1
    fi
}

# ---- network namespaces (N >= 2) -------------------------------------------------------------

# net_up: bridge + one namespace per node, addresses only on them, no route out.
net_up() {
    local i ns veth err
    install -d -m 0755 "$NET_DIR"
    # `ip netns add` bind-mounts /run/netns onto itself the first time; undo only what we did.
    if [[ ! -e $NET_DIR/netns-mount ]]; then
        if mountpoint -q /run/netns 2>/dev/null; then echo keep >"$NET_DIR/netns-mount"
        elif [[ -d /run/netns ]]; then echo umount >"$NET_DIR/netns-mount"
        else echo umount-rmdir >"$NET_DIR/netns-mount"; fi
    fi
    if ! err=$(ip link add "$BRIDGE" type bridge 2>&1); then
        net_down
        cannot "cannot create bridge $BRIDGE (needs CAP_NET_ADMIN): $err"
    fi
    sysctl -qw "net.ipv6.conf.$BRIDGE.disable_ipv6=1" 2>/dev/null || true
    ip addr add "$CTL_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    {
        echo "127.0.0.1 localhost"
        echo "$CTL_ADDR $(hostname -s)"
        for i in $(seq 1 "$NODES"); do echo "$SUBNET.$((10 + i)) n$i"; done
    } >"$NET_DIR/hosts"
    echo "$NODES" >"$NET_DIR/nodes"
    for i in $(seq 1 "$NODES"); do
        ns=$NS_PREFIX$i veth=$VETH_PREFIX$i
        if ! err=$(ip netns add "$ns" 2>&1); then
            net_down
            cannot "cannot create network namespace $ns (needs CAP_SYS_ADMIN): $err"
        fi
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        sysctl -qw "net.ipv6.conf.$veth.disable_ipv6=1" 2>/dev/null || true
        ip link set "$veth" master "$BRIDGE" up
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1 2>/dev/null || true
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$SUBNET.$((10 + i))/24" dev eth0
        ip -n "$ns" link set eth0 up
        # The rule: a node has no default route (only the bridge's /24 and its own loopback).
        if ip -n "$ns" route show default | grep -q .; then die "namespace $ns has a default route"; fi
    done
}

# net_down: every namespace/veth/bridge/mount of ours, and nothing else.
net_down() {
    local ns pid how
    for ns in $(ip netns list 2>/dev/null | awk -v p="$NS_PREFIX" 'index($1, p) == 1 {print $1}'); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
        sleep 0.3
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
        log "removed namespace $ns"
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE" && log "removed bridge $BRIDGE"
    how=$(cat "$NET_DIR/netns-mount" 2>/dev/null || echo keep)
    if [[ $how != keep ]] && mountpoint -q /run/netns 2>/dev/null \
        && [[ -z $(ls -A /run/netns 2>/dev/null) ]]; then
        umount /run/netns && log "unmounted /run/netns"
        [[ $how == umount-rmdir ]] && rmdir /run/netns 2>/dev/null
    fi
    rm -rf "$NET_DIR"
}

# start_node I: slurmd for n<I> in its namespace, with its own hostname and /etc/hosts.
start_node() {
    local i=$1 name=n$1
    # nsenter --net (not `ip netns exec`, which remounts /sys and hides /sys/fs/cgroup from slurmd).
    nsenter --net="/run/netns/$NS_PREFIX$i" -- unshare --uts --mount --propagation slave -- sh -c \
        'mount --bind "$1" /etc/hosts && hostname "$2" && exec /usr/sbin/slurmd -N "$2"' \
        sh "$NET_DIR/hosts" "$name" || die "slurmd $name did not start (see $LOG_DIR/slurmd-$name.log)"
    wait_for 15 test -s "$NET_DIR/slurmd-$name.pid" || die "slurmd $name wrote no pid file"
}

# ---- start / stop ----------------------------------------------------------------------------

do_stop() {
    local f
    stop_pidfile /run/slurmd.pid slurmd
    for f in "$NET_DIR"/slurmd-*.pid; do [[ -e $f ]] && stop_pidfile "$f" "slurmd $(basename "$f" .pid)"; done
    stop_pidfile /run/slurmctld.pid slurmctld
    stop_pidfile /run/slurmdbd.pid slurmdbd
    stop_pidfile /run/mysqld/mysqld.pid mariadbd
    stop_pidfile /run/munge/munged.pid munged
    net_down
}

do_start() {
    local t0=$SECONDS
    if cluster_up && timeout 5 bash -c 'munge -n | unmunge' >/dev/null 2>&1; then
        log "already up with $NODES node(s) (no-op)"
        return 0
    fi
    ((NODES == 1)) || [[ -n $(command -v nsenter) || ${SLURM_DEV_NO_INSTALL:-0} != 1 ]] \
        || cannot "nsenter (util-linux) is missing"
    install_packages
    # Clean state: stop whatever is half up (or up with another node count), wipe state and spool.
    do_stop
    install -d -o slurm -g slurm "$STATE_DIR" "$LOG_DIR"
    install -d "$SPOOL_DIR"
    find "$STATE_DIR" "$SPOOL_DIR" -mindepth 1 -delete
    ((NODES > 1)) && net_up
    write_config
    start_munge
    if [[ $ACCOUNTING == 1 ]]; then
        start_mariadb
        reset_accounting_db
        start_slurmdbd
    fi
    /usr/sbin/slurmctld -c -i || die "slurmctld did not start (see $LOG_DIR/slurmctld.log)"
    wait_for 30 scontrol ping || die "slurmctld does not answer (see $LOG_DIR/slurmctld.log)"
    if ((NODES > 1)); then
        local i
        for i in $(seq 1 "$NODES"); do start_node "$i"; done
    else
        # -N: the node is called localhost whatever `hostname` says.
        /usr/sbin/slurmd -N localhost || die "slurmd did not start (see $LOG_DIR/slurmd.log)"
    fi
    local deadline=$((SECONDS + 30))
    until nodes_ready; do
        ((SECONDS < deadline)) || die "nodes never became idle: $(timeout 5 sinfo -h -N -o '%N %T %E' 2>&1 | tr '\n' ';')"
        sleep 0.3
    done
    if [[ $ACCOUNTING == 1 ]]; then
        wait_for 30 sacct -n -X -S now || die "sacct does not work (slurmdbd: $LOG_DIR/slurmdbd.log)"
    fi
    log "up in $((SECONDS - t0)) s: $(timeout 5 sinfo -h -o '%P %a %D %T %N' 2>&1)"
}

do_status() {
    local name f n
    for name in munged:/run/munge/munged.pid mariadbd:/run/mysqld/mysqld.pid \
        slurmdbd:/run/slurmdbd.pid slurmctld:/run/slurmctld.pid; do
        f=${name#*:}
        if pid_alive "$f"; then echo "${name%%:*}: running (pid $(tr -dc '0-9' <"$f"))"
        else echo "${name%%:*}: stopped"; fi
    done
    for n in $(node_names); do
        f=$(slurmd_pidfile "$n")
        if pid_alive "$f"; then echo "slurmd $n: running (pid $(tr -dc '0-9' <"$f"))"
        else echo "slurmd $n: stopped"; fi
    done
    if cluster_up; then
        echo "cluster: up ($(timeout 5 sinfo -h -o '%P %a %D %T %N' 2>&1))"
    else
        echo "cluster: down (or not with $NODES node(s))"
        return 1
    fi
}

cmd=${1:-}
shift || true
NODES_GIVEN=0
NODE_ARG=
if [[ $cmd == node-down || $cmd == node-up ]]; then
    NODE_ARG=${1:-}
    [[ $NODE_ARG =~ ^[0-9]+$ ]] || { echo "usage: $0 $cmd I (node n<I>)" >&2; exit 2; }
    shift
fi
while (($#)); do
    case $1 in
        --nodes) NODES=${2:-}; NODES_GIVEN=1; shift 2 || shift ;;
        --nodes=*) NODES=${1#--nodes=}; NODES_GIVEN=1; shift ;;
        *) echo "usage: $0 start|stop|status [--nodes N]" >&2; exit 2 ;;
    esac
done
[[ $NODES =~ ^[0-9]+$ ]] && ((NODES >= 1 && NODES <= 16)) \
    || { echo "slurm-dev-cluster: --nodes $NODES: allowed values are 1..16" >&2; exit 2; }
# status/stop without --nodes describe the cluster that is up.
if [[ $cmd != start && $NODES_GIVEN == 0 && -s $NET_DIR/nodes ]]; then
    NODES=$(cat "$NET_DIR/nodes")
fi

# node-down I: node n<I> is lost, as when it loses power: SIGKILL every process in its network
# namespace (slurmd, slurmstepd, the job's tasks); the namespace and its address stay, so
# `node-up I` can bring the node back. Only a multi-node cluster's own namespaces are touched.
do_node_down() {
    local i=$1 ns=$NS_PREFIX$1 pid
    ip netns list | grep -qw "$ns" || die "no node n$i (namespace $ns) in this cluster"
    for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done
    rm -f "$NET_DIR/slurmd-n$i.pid"
    log "node n$i down (every process in $ns killed)"
}

# node-up I: start slurmd of node n<I> again (ReturnToService=2 puts it back in service).
do_node_up() {
    ip netns list | grep -qw "$NS_PREFIX$1" || die "no node n$1 (namespace $NS_PREFIX$1)"
    pid_alive "$NET_DIR/slurmd-n$1.pid" && { log "node n$1 already up"; return; }
    start_node "$1"
    log "node n$1 up"
}

case $cmd in
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
    node-down) do_node_down "$NODE_ARG" ;;
    node-up) do_node_up "$NODE_ARG" ;;
    *) echo "usage: $0 start|stop|status [--nodes N] | node-down I | node-up I" >&2; exit 2 ;;
esac
