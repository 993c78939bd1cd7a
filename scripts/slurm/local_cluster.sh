#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for tests: munged, slurmctld and slurmd from the Debian packages
# (munge, slurmctld, slurmd, slurm-client), started by hand as root (no systemd) and stopped by their PIDs.
#
#   scripts/slurm/local_cluster.sh start [STATE_DIR]   # prints the SLURM_CONF line to export
#   scripts/slurm/local_cluster.sh stop  [STATE_DIR]
#   scripts/slurm/local_cluster.sh env   [STATE_DIR]   # prints the SLURM_CONF line again
#
# Everything lives in STATE_DIR (default $HARA_SLURM_DIR or /tmp/hara-slurm): slurm.conf, the munge key and socket,
# state, spool, logs and PID files. Nothing is written under /etc. Slurm commands find the config through
# SLURM_CONF, or, where that is unset, through /run/slurm/conf/slurm.conf, the fallback location of Slurm's clients
# (slurmd's configless cache): the script links it to STATE_DIR/slurm.conf while the cluster runs. The link is
# needed because snakemake's job step drops SLURM_CONF from the environment of the `srun` it runs inside each job.
# A link left by a cluster that was never stopped is replaced once that cluster's slurmctld is gone.
# HARA_SLURM_FALLBACK_CONF moves the link elsewhere, for tests of this script only (srun inside jobs then fails).
#
# Accounting is off (no slurmdbd): `sacct` then fails, so snakemake's Slurm plugin must poll with `squeue`
# (the tests add --slurm-status-command squeue to profiles/slurm, which polls sacct), which needs finished jobs to
# stay listed: MinJobAge=3600.
#
# GPUs: the node declares HARA_SLURM_GPUS (default 2) GPUs as a generic resource (GRES), so that jobs asking for
# `--gpus=N` are scheduled like on a GPU cluster. The devices are fake (STATE_DIR/dev/fakegpu<i>, links to /dev/null:
# slurmd refuses a plain file) and AutoDetect is off; a job holding one sees CUDA_VISIBLE_DEVICES, finds no CUDA
# driver and runs on the CPU. Asking for more GPUs than the node has is refused at submission.
#
# HARA_SLURM_CPUS declares that many CPUs instead of the detected ones (oversubscription, for tests whose jobs mostly
# wait): more jobs then run side by side, sharing the real cores.
set -euo pipefail

ACTION=${1:-}
STATE_DIR=$(realpath -m "${2:-${HARA_SLURM_DIR:-/tmp/hara-slurm}}")
CONF="$STATE_DIR/slurm.conf"
CTLD_PORT=${HARA_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${HARA_SLURMD_PORT:-6818}
DAEMONS=(slurmd slurmctld munged)   # stop order: the reverse of the start order
FALLBACK_CONF=${HARA_SLURM_FALLBACK_CONF:-/run/slurm/conf/slurm.conf}
GPUS=${HARA_SLURM_GPUS:-2}
CPUS=${HARA_SLURM_CPUS:-}   # empty: the CPUs slurmd detects

die() { echo "local_cluster.sh: $*" >&2; exit 1; }

check_prerequisites() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd starts jobs as their submitting user)"
    local binary
    for binary in munged mungekey slurmctld slurmd sbatch squeue sinfo scontrol; do
        command -v "$binary" >/dev/null 2>&1 \
            || die "$binary not found (apt-get install munge slurmctld slurmd slurm-client)"
    done
}

write_munge_key() {
    [ -s "$STATE_DIR/key/munge.key" ] && return 0
    mungekey --create --keyfile="$STATE_DIR/key/munge.key"
    chmod 400 "$STATE_DIR/key/munge.key"
}

# The node's CPUs and memory as slurmd detects them, so slurmd registers exactly what slurm.conf declares.
node_line() {
    local line
    line=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]*/NodeName='"$(hostname -s)"' NodeAddr=127.0.0.1/')
    if [ -n "$CPUS" ]; then  # declared CPUs instead of the detected ones (slurmd takes them: config_overrides)
        line=$(echo "$line" | sed -e "s/CPUs=[0-9]*/CPUs=$CPUS/; s/SocketsPerBoard=[0-9]*/SocketsPerBoard=1/" \
            -e "s/CoresPerSocket=[0-9]*/CoresPerSocket=$CPUS/; s/ThreadsPerCore=[0-9]*/ThreadsPerCore=1/")
    fi
    echo "$line"
}

write_fake_gpus() {
    local i
    mkdir -p "$STATE_DIR/dev"
    for i in $(seq 0 $((GPUS - 1))); do
        ln -sfn /dev/null "$STATE_DIR/dev/fakegpu$i"
    done
    cat >"$STATE_DIR/gres.conf" <<EOF
# Written by scripts/slurm/local_cluster.sh: $GPUS fake GPUs (links to /dev/null), no autodetection.
AutoDetect=off
Name=gpu File=$STATE_DIR/dev/fakegpu[0-$((GPUS - 1))]
EOF
}

write_slurm_conf() {
    cat >"$CONF" <<EOF
# Written by scripts/slurm/local_cluster.sh: a one-node test cluster, all state under $STATE_DIR.
ClusterName=hara-test
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE_DIR/munge/munge.socket
StateSaveLocation=$STATE_DIR/ctld
SlurmdSpoolDir=$STATE_DIR/spool
SlurmctldPidFile=$STATE_DIR/slurmctld.pid
SlurmdPidFile=$STATE_DIR/slurmd.pid
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd.log
MpiDefault=none
# A GPU GRES without accounting: do not add AccountingStorageTRES=gres/gpu (slurmctld dies without slurmdbd).
GresTypes=gpu
# No cgroups (containers and CI machines rarely delegate them): track processes by their parent chain.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Finished jobs stay visible to squeue for an hour: the status poll of snakemake's Slurm plugin relies on it (it needs
# at least 3 x its first-check delay), and the tests read each run's job history from it.
MinJobAge=3600
MailProg=/bin/true
ReturnToService=2
# Memory is not a consumable resource on this one-machine cluster: requests are checked against the node's
# RealMemory but not reserved, so two small jobs share a 2-core CI machine as they do under \`snakemake --cores 2\`.
# DefMemPerCPU keeps a job without --mem from claiming the whole node if this is switched to CR_CPU_Memory.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
DefMemPerCPU=1000
SchedulerType=sched/backfill
$([ -n "$CPUS" ] && echo "SlurmdParameters=config_overrides")
$(node_line) Gres=gpu:$GPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
# A partition with a site MaxTime (30 min) on the same node, for hara preflight --partition short.
PartitionName=short Nodes=ALL MaxTime=30 State=UP
EOF
}

# A cluster this script started whose session ended without `stop` (a killed test run, a machine restart that kept
# /run and /tmp) leaves FALLBACK_CONF linked to its slurm.conf. Replace that link once its slurmctld is gone; refuse
# while it runs (it holds the ports) and for any config this script did not write.
link_fallback_conf() {
    local current current_dir
    current=$(readlink -f "$FALLBACK_CONF" || true)
    if [ -e "$FALLBACK_CONF" ] && [ "$current" != "$CONF" ]; then
        head -1 "$current" | grep -q "^# Written by scripts/slurm/local_cluster.sh" \
            || die "$FALLBACK_CONF belongs to another Slurm installation; not replacing it"
        current_dir=$(dirname "$current")
        is_running slurmctld "$current_dir" \
            && die "a test cluster still runs in $current_dir; stop it: $0 stop $current_dir"
        echo "local_cluster.sh: replacing $FALLBACK_CONF," \
            "left by a test cluster in $current_dir that was not stopped" >&2
    fi
    mkdir -p "$(dirname "$FALLBACK_CONF")"
    ln -sfn "$CONF" "$FALLBACK_CONF"
}

unlink_fallback_conf() {
    if [ -L "$FALLBACK_CONF" ] && [ "$(readlink "$FALLBACK_CONF")" = "$CONF" ]; then
        rm -f "$FALLBACK_CONF"
    fi
}

# $1: a daemon; $2: the state folder it was started in (default STATE_DIR).
pid_of() { cat "${2:-$STATE_DIR}/$1.pid" 2>/dev/null || true; }

# Running means: that command (after a restart a stale PID file may name an unrelated process) and not a zombie
# (a container's PID 1 may never reap the daemons it inherits).
is_running() {
    local pid stat
    pid=$(pid_of "$1" "${2:-}")
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }   # the fields after the command name: the state comes first
    [ "${stat%% *}" != Z ]
}

wait_for_node() {
    local attempt state
    for attempt in $(seq 60); do
        state=$(SLURM_CONF="$CONF" sinfo --noheader --format=%T 2>/dev/null | head -1 || true)
        case "$state" in
            idle|mixed|allocated) return 0 ;;
        esac
        sleep 0.5
    done
    die "node not idle after 30 s (state: '${state:-none}'); see $STATE_DIR/log/"
}

start() {
    check_prerequisites
    is_running slurmctld && die "already running in $STATE_DIR (stop it first)"
    # munged insists on a private key folder and a socket folder that everyone may enter.
    mkdir -p "$STATE_DIR"/{key,munge,ctld,spool,log}
    chmod 700 "$STATE_DIR/key"
    chmod 755 "$STATE_DIR" "$STATE_DIR/munge"
    write_munge_key
    write_fake_gpus
    write_slurm_conf
    link_fallback_conf
    munged --key-file="$STATE_DIR/key/munge.key" --socket="$STATE_DIR/munge/munge.socket" \
        --pid-file="$STATE_DIR/munged.pid" --log-file="$STATE_DIR/log/munged.log" \
        --seed-file="$STATE_DIR/key/munged.seed"
    # -c: a fresh cluster every start (no jobs recovered from a previous test session).
    SLURM_CONF="$CONF" slurmctld -c
    SLURM_CONF="$CONF" slurmd
    wait_for_node
    echo "export SLURM_CONF=$CONF"
}

stop_daemon() {
    local name=$1 pid attempt
    pid=$(pid_of "$name")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || { rm -f "$STATE_DIR/$name.pid"; return 0; }
    kill "$pid"
    for attempt in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$STATE_DIR/$name.pid"; return 0; }
        sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$STATE_DIR/$name.pid"
}

stop() {
    local name
    for name in "${DAEMONS[@]}"; do
        stop_daemon "$name"
    done
    unlink_fallback_conf
}

case "$ACTION" in
    start) start ;;
    stop) stop ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) die "usage: $0 start|stop|env [STATE_DIR]" ;;
esac
