#!/usr/bin/env bash
# A real single-node Slurm cluster on localhost, for development and CI.
#
#   scripts/slurm-dev-cluster.sh start    install (if needed) and start munge, mariadb, slurmdbd,
#                                         slurmctld, slurmd with CLEAN state (no old jobs, empty
#                                         spool, fresh accounting DB); idempotent.
#   scripts/slurm-dev-cluster.sh stop     stop every daemon this script starts.
#   scripts/slurm-dev-cluster.sh status   print what is up; exit 0 only if the cluster takes jobs.
#
# Why this shape: CI machines (Debian 12, root, no systemd) have no Slurm; the launcher must be
# tested against the real thing (sbatch, sacct, scontrol requeue), not a mock. Every probe is capped
# with `timeout` because a half-dead daemon makes munge/scontrol retry for minutes, and a killed
# daemon may linger as a zombie (PID 1 reaps late), so state Z counts as dead.
#
# Environment:
#   SLURM_DEV_CPUS        CPUs advertised for the node (default: max(4, nproc)) — config_overrides
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

die() { echo "slurm-dev-cluster: error: $*" >&2; exit 1; }
log() { echo "slurm-dev-cluster: $*" >&2; }

[[ $(id -u) -eq 0 ]] || die "must run as root (it installs packages and starts system daemons)"

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
    mkdir -p "$CONF_DIR"
    cat >"$CONF_DIR/slurm.conf.tmp" <<EOF
# Written by olmoablate scripts/slurm-dev-cluster.sh — a single-node dev/CI cluster.
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
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
KillWait=5
MinJobAge=300
Waittime=0
AccountingStorageType=$acct_type
AccountingStorageHost=localhost
AccountingStoragePort=6819
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$cpus RealMemory=$real_mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
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

cluster_up() {
    pid_alive /run/slurmctld.pid && pid_alive /run/slurmd.pid || return 1
    timeout 5 sinfo -h -N -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)' || return 1
    if [[ $ACCOUNTING == 1 ]]; then
        pid_alive /run/slurmdbd.pid || return 1
        timeout 5 sacct -n -X -S now >/dev/null 2>&1 || return 1
    fi
}

do_stop() {
    stop_pidfile /run/slurmd.pid slurmd
    stop_pidfile /run/slurmctld.pid slurmctld
    stop_pidfile /run/slurmdbd.pid slurmdbd
    stop_pidfile /run/mysqld/mysqld.pid mariadbd
    stop_pidfile /run/munge/munged.pid munged
}

do_start() {
    local t0=$SECONDS
    if cluster_up && timeout 5 bash -c 'munge -n | unmunge' >/dev/null 2>&1; then
        log "already up (no-op)"
        return 0
    fi
    install_packages
    # Clean state: stop whatever is half up, wipe controller state and spool.
    do_stop
    install -d -o slurm -g slurm "$STATE_DIR" "$LOG_DIR"
    install -d "$SPOOL_DIR"
    find "$STATE_DIR" "$SPOOL_DIR" -mindepth 1 -delete
    write_config
    start_munge
    if [[ $ACCOUNTING == 1 ]]; then
        start_mariadb
        reset_accounting_db
        start_slurmdbd
    fi
    /usr/sbin/slurmctld -c -i || die "slurmctld did not start (see $LOG_DIR/slurmctld.log)"
    wait_for 30 scontrol ping || die "slurmctld does not answer (see $LOG_DIR/slurmctld.log)"
    # -N: the node is called localhost whatever `hostname` says.
    /usr/sbin/slurmd -N localhost || die "slurmd did not start (see $LOG_DIR/slurmd.log)"
    local deadline=$((SECONDS + 30))
    until timeout 5 sinfo -h -N -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; do
        ((SECONDS < deadline)) || die "node localhost never became idle: $(timeout 5 sinfo -h -N -o '%T %E' 2>&1)"
        sleep 0.3
    done
    if [[ $ACCOUNTING == 1 ]]; then
        wait_for 30 sacct -n -X -S now || die "sacct does not work (slurmdbd: $LOG_DIR/slurmdbd.log)"
    fi
    log "up in $((SECONDS - t0)) s: $(timeout 5 sinfo -h -o '%P %a %D %T %N' 2>&1)"
}

do_status() {
    local name f
    for name in munged:/run/munge/munged.pid mariadbd:/run/mysqld/mysqld.pid \
        slurmdbd:/run/slurmdbd.pid slurmctld:/run/slurmctld.pid slurmd:/run/slurmd.pid; do
        f=${name#*:}
        if pid_alive "$f"; then echo "${name%%:*}: running (pid $(tr -dc '0-9' <"$f"))"
        else echo "${name%%:*}: stopped"; fi
    done
    if cluster_up; then
        echo "cluster: up ($(timeout 5 sinfo -h -o '%P %a %D %T %N' 2>&1))"
    else
        echo "cluster: down"
        return 1
    fi
}

case ${1:-} in
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
