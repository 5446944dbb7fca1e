#!/usr/bin/env bash
# A simulated 3-node Slurm cluster on this machine, to try det_sdk's Slurm resource
# manager (det master up --resource-manager slurm) and to test it.
#
#   bash scripts/slurm-sim.sh up       # install Slurm if missing, start it, print the export line
#   eval "$(bash scripts/slurm-sim.sh up | tail -1)"   # ... and use it in this shell
#   bash scripts/slurm-sim.sh status   # exit 0 if it answers
#   bash scripts/slurm-sim.sh down     # cancel its jobs, stop it
#
# One slurmctld and three slurmd (node1..node3, NodeAddr 127.0.0.1-3, 2 CPUs each:
# DET_SLURM_SIM_CPUS) share this machine's filesystem, as the nodes of a real cluster
# share a network filesystem. Partitions: `debug` (all nodes, the default) and `one`
# (node1 only). Everything lives in $DET_SLURM_SIM_DIR (default /tmp/det-slurm-sim):
# configuration, munge's key and socket, state, logs. Safe to re-run: `up` on a running
# cluster only prints the export line, `down` on a stopped one does nothing.
#
# Debian's packages (slurmctld, slurmd, slurm-client, munge 22.05) are installed with
# apt-get when missing; that needs root, as running slurmd does (it starts jobs as
# their user). No systemd: the daemons run in the background of this script's caller.
set -euo pipefail

DIR=${DET_SLURM_SIM_DIR:-/tmp/det-slurm-sim}
PORT=${DET_SLURM_SIM_PORT:-16817}  # slurmctld; the nodes use the next three ports
CPUS=${DET_SLURM_SIM_CPUS:-2}
NODES=(node1 node2 node3)
CONF=$DIR/slurm.conf

say() { printf '[slurm-sim] %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

answers() { SLURM_CONF=$CONF timeout 5 sinfo -h -o %t >/dev/null 2>&1; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
     && command -v sbatch >/dev/null && command -v munged >/dev/null; then
    return
  fi
  [ "$(id -u)" = 0 ] || die "Slurm is not installed and installing it needs root (apt-get)"
  command -v apt-get >/dev/null || die "Slurm is not installed and there is no apt-get here"
  say "installing Debian's slurmctld slurmd slurm-client munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq slurmctld slurmd slurm-client munge >&2
}

write_config() {
  mkdir -p "$DIR"/{munge,state,log,run} "${NODES[@]/#/$DIR/spool/}"
  chmod 700 "$DIR" "$DIR/munge"
  local n=0 nodes=""
  for node in "${NODES[@]}"; do
    n=$((n + 1))
    nodes+="NodeName=$node NodeAddr=127.0.0.$n NodeHostname=$node Port=$((PORT + n)) CPUs=$CPUS State=UNKNOWN"$'\n'
  done
  cat >"$CONF.tmp" <<EOF
# written by det_sdk's scripts/slurm-sim.sh: a simulated cluster on one machine
ClusterName=detsim
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
# several slurmd on one host: each reports the configured CPUs, not the machine's
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# ended jobs stay visible to squeue for 5 minutes; SIGKILL 5 s after a cancel's SIGTERM
MinJobAge=300
KillWait=5
InactiveLimit=0
$nodes
PartitionName=debug Nodes=node[1-3] Default=YES MaxTime=INFINITE State=UP
PartitionName=one Nodes=node1 MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
}

up() {
  install
  if alive "$DIR/run/slurmctld.pid" && answers; then
    say "already running ($DIR)"
    echo "export SLURM_CONF=$CONF"
    return
  fi
  down_quietly
  write_config
  if [ ! -f "$DIR/munge/munge.key" ]; then
    # a key of its own: the machine's munge (if any) is left alone
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/munge/munge.key"
  fi
  munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed" 2>>"$DIR/log/munged.log" \
    || die "munged did not start: $(tail -n 3 "$DIR/log/munged.log")"
  export SLURM_CONF=$CONF
  # -i: ignore state left by an earlier run; the daemons detach from this shell
  setsid slurmctld -D -i -f "$CONF" >>"$DIR/log/slurmctld.out" 2>&1 </dev/null &
  # the nodes register with a running controller at once (else they retry seconds later)
  for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
  for node in "${NODES[@]}"; do
    setsid slurmd -D -N "$node" -f "$CONF" >>"$DIR/log/slurmd-$node.out" 2>&1 </dev/null &
  done
  local deadline=$((SECONDS + 30)) idle
  while :; do
    idle=$(sinfo -h -p debug -t idle -o %D 2>/dev/null || true)
    [ "${idle:-0}" = "${#NODES[@]}" ] && break
    if [ $SECONDS -gt $deadline ]; then
      tail -n 5 "$DIR"/log/*.log >&2 || true
      down_quietly
      die "the cluster did not come up within 30 s (logs above, and in $DIR/log)"
    fi
    sleep 0.2
  done
  say "3 nodes x $CPUS CPUs up (partitions: debug = node[1-3], one = node1); state in $DIR"
  echo "export SLURM_CONF=$CONF"
}

stop_pids() {  # stop the daemons whose pid files are given, together; wait for them
  local f pids=()
  for f in "$@"; do
    [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && pids+=("$(cat "$f")")
  done
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    local left
    for _ in $(seq 100); do
      left=0
      for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
      [ $left = 0 ] && break
      sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null; done
  fi
  rm -f "$@"
}

down_quietly() {
  [ -f "$CONF" ] || return 0
  export SLURM_CONF=$CONF
  if alive "$DIR/run/slurmctld.pid" && answers; then
    # jobs' processes (slurmstepd) would outlive slurmd: cancel them first
    scancel --full --signal=KILL -u "$(id -un)" 2>/dev/null || true
    scancel -u "$(id -un)" 2>/dev/null || true
    for _ in $(seq 50); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  local files=("$DIR/run/slurmctld.pid")
  for node in "${NODES[@]}"; do files+=("$DIR/run/slurmd-$node.pid"); done
  stop_pids "${files[@]}"
  stop_pids "$DIR/run/munged.pid"
}

case "${1:-}" in
  up) up ;;
  down) down_quietly; say "stopped ($DIR)" ;;
  status)
    if alive "$DIR/run/slurmctld.pid" && answers; then
      SLURM_CONF=$CONF sinfo; echo "export SLURM_CONF=$CONF"
    else
      say "not running ($DIR)"; exit 3
    fi ;;
  *) echo "usage: bash scripts/slurm-sim.sh up|down|status" >&2; exit 2 ;;
esac
