#!/usr/bin/env bash
# A real Slurm cluster on this machine: munged + slurmctld + one slurmd per node, all private to
# one directory. Debian's slurm-wlm and munge packages (apt-get install slurm-wlm munge).
#
#   cluster/local-cluster.sh up       start it (idempotent: a healthy cluster is left alone,
#                                     a half-up one is stopped and started again)
#   cluster/local-cluster.sh down     stop the daemons this script started (found by their
#                                     configuration path, never by name alone)
#   cluster/local-cluster.sh status   daemons, sinfo; exit 0 only when every node answers
#   cluster/local-cluster.sh env      the line to paste: export SLURM_CONF=...
#
# Settings (environment):
#   DLSUITE_CLUSTER_DIR    where slurm.conf, state, spool, logs and the munge socket live
#                          (default /tmp/dlsuite-slurm)
#   DLSUITE_CLUSTER_NODES  nodes, node1..nodeN, each a slurmd with its own port (default 2)
#   DLSUITE_CLUSTER_PORT   slurmctld's port; slurmd of node i listens on PORT+i (default 16817)
#   DLSUITE_CLUSTER_LINK   1 (default): link /etc/slurm/slurm.conf to this cluster's when absent;
#                          0: never (the tests' private clusters)
#
# Every node is this machine (NodeHostname=$(hostname), NodeAddr=127.0.0.1) and claims all its
# cores: a cluster for running the suite's Slurm path for real, not for fair timings of
# concurrent jobs. Slurm commands find it through SLURM_CONF; when /etc/slurm/slurm.conf does
# not exist, `up` also links it there (and `down` removes that link), so plain `sbatch` works.
set -euo pipefail

DIR="${DLSUITE_CLUSTER_DIR:-/tmp/dlsuite-slurm}"
NODES="${DLSUITE_CLUSTER_NODES:-2}"
PORT="${DLSUITE_CLUSTER_PORT:-16817}"
CONF="$DIR/slurm.conf"
ETC_CONF=/etc/slurm/slurm.conf
export SLURM_CONF="$CONF"

die() { echo "local-cluster: $*" >&2; exit 1; }
say() { echo "local-cluster: $*"; }

need() {
    local missing=()
    for b in munged mungekey slurmctld slurmd sinfo scontrol sbatch; do
        command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || missing+=("$b")
    done
    [ ${#missing[@]} -eq 0 ] ||
        die "missing ${missing[*]}; install them with: apt-get install -y slurm-wlm munge"
    [ "$(id -u)" -eq 0 ] || die "run as root (slurmd must start job steps as any user)"
    [[ "$NODES" =~ ^[1-9][0-9]?$ ]] || die "DLSUITE_CLUSTER_NODES=$NODES: give 1 to 99"
    [[ "$PORT" =~ ^[0-9]+$ ]] || die "DLSUITE_CLUSTER_PORT=$PORT: give a port number"
}

# PIDs of live processes whose command line holds this cluster's own path (the daemons get it
# through -f / --socket, so daemons of another cluster directory are never matched).
ours() { # $1: program name
    local pid cmd
    for pid in $(pgrep -x "$1" 2>/dev/null || true); do
        cmd=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null || true)
        case "$cmd" in *"$DIR/"*) echo "$pid" ;; esac
    done
}

node_names() { local i; for ((i = 1; i <= NODES; i++)); do echo "node$i"; done; }

write_conf() {
    local cpus mem i
    cpus=$(nproc)
    mem=$(($(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) / NODES))
    mkdir -p "$DIR/state" "$DIR/log" "$DIR/spool"
    {
        echo "# written by cluster/local-cluster.sh; rewritten by every 'up'"
        echo "ClusterName=dlsuite-local"
        echo "SlurmctldHost=localhost(127.0.0.1)"
        echo "SlurmctldPort=$PORT"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "AuthInfo=socket=$DIR/munge/munge.socket"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "StateSaveLocation=$DIR/state"
        echo "SlurmdSpoolDir=$DIR/spool/%n"
        echo "SlurmctldPidFile=$DIR/slurmctld.pid"
        echo "SlurmdPidFile=$DIR/slurmd-%n.pid"
        echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
        echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "MpiDefault=none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "ReturnToService=2"
        echo "SlurmdTimeout=60"
        echo "KillWait=5"
        echo "MinJobAge=600"
        echo "SchedulerParameters=sched_interval=2"
        for ((i = 1; i <= NODES; i++)); do
            echo "NodeName=node$i NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((PORT + i)) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP"
    } >"$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
    # slurmd and the clients read cgroup.conf only with cgroup plugins; none are configured.
}

start_munge() {
    if [ -n "$(ours munged)" ] && munge -S "$DIR/munge/munge.socket" -n </dev/null | unmunge -S "$DIR/munge/munge.socket" >/dev/null 2>&1; then
        return
    fi
    mkdir -p "$DIR/munge"
    if [ ! -s "$DIR/munge/munge.key" ]; then
        mungekey --create --keyfile="$DIR/munge/munge.key" --force
    fi
    chown -R munge:munge "$DIR/munge"
    chmod 0755 "$DIR/munge" # clients need to reach the socket; the key itself is 0600
    chmod 0600 "$DIR/munge/munge.key"
    runuser -u munge -- munged \
        --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
        --seed-file="$DIR/munge/munged.seed"
    munge -S "$DIR/munge/munge.socket" -n </dev/null | unmunge -S "$DIR/munge/munge.socket" >/dev/null ||
        die "munged does not answer; see $DIR/munge/munged.log"
}

link_etc_conf() {
    if [ "${DLSUITE_CLUSTER_LINK:-1}" = 1 ] && [ ! -e "$ETC_CONF" ] && [ -d /etc/slurm ]; then
        ln -s "$CONF" "$ETC_CONF"
    fi
}

nodes_idle() { # every node answers (idle, mixed, allocated or completing)
    local states
    states=$(sinfo -h -N -o "%N %T" 2>/dev/null) || return 1
    [ "$(echo "$states" | grep -cE ' (idle|mixed|allocated|completing)$')" -eq "$NODES" ]
}

healthy() {
    [ -f "$CONF" ] && [ -n "$(ours munged)" ] && [ -n "$(ours slurmctld)" ] &&
        [ "$(ours slurmd | wc -l)" -eq "$NODES" ] && scontrol ping >/dev/null 2>&1 && nodes_idle
}

stop_all() {
    local prog pid left
    for prog in slurmd slurmctld munged; do
        for pid in $(ours "$prog"); do kill -TERM "$pid" 2>/dev/null || true; done
    done
    for _ in $(seq 1 50); do
        left="$(ours slurmd)$(ours slurmctld)$(ours munged)"
        [ -z "$left" ] && break
        sleep 0.2
    done
    for prog in slurmd slurmctld munged; do
        for pid in $(ours "$prog"); do kill -KILL "$pid" 2>/dev/null || true; done
    done
    if [ -L "$ETC_CONF" ] && [ "$(readlink "$ETC_CONF")" = "$CONF" ]; then
        rm -f "$ETC_CONF"
    fi
}

cmd_up() {
    need
    if healthy; then
        say "already up: $NODES node(s), $CONF"
        link_etc_conf
        return
    fi
    stop_all # whatever half of an earlier cluster is left
    write_conf
    start_munge
    link_etc_conf
    /usr/sbin/slurmctld -f "$CONF" || die "slurmctld did not start; see $DIR/log/slurmctld.log"
    local n
    for n in $(node_names); do
        mkdir -p "$DIR/spool/$n"
        /usr/sbin/slurmd -f "$CONF" -N "$n" || die "slurmd -N $n did not start; see $DIR/log/slurmd-$n.log"
    done
    for _ in $(seq 1 120); do
        if scontrol ping >/dev/null 2>&1 && nodes_idle; then
            say "up: $NODES node(s) in partition debug; export SLURM_CONF=$CONF"
            sinfo -N
            return
        fi
        # a node remembered as down from an earlier run comes back here
        scontrol update NodeName="node[1-$NODES]" State=RESUME >/dev/null 2>&1 || true
        sleep 0.5
    done
    sinfo -N -l >&2 || true
    tail -n 20 "$DIR"/log/*.log >&2 || true
    die "the nodes did not become idle within 60 s (logs above, in $DIR/log)"
}

cmd_down() {
    stop_all
    say "down ($DIR kept: state and logs; remove it for a clean start)"
}

cmd_status() {
    say "dir $DIR, conf $CONF"
    echo "munged:    $(ours munged | tr '\n' ' ')"
    echo "slurmctld: $(ours slurmctld | tr '\n' ' ')"
    echo "slurmd:    $(ours slurmd | tr '\n' ' ')"
    if [ -f "$CONF" ] && scontrol ping >/dev/null 2>&1; then
        sinfo -N
    fi
    healthy
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
