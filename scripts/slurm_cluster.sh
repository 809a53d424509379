#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the tests that submit real jobs:
#   scripts/slurm_cluster.sh start    install Debian's slurm-wlm and munge if missing, start munged,
#                                     slurmctld and slurmd; idempotent; waits until the node is idle.
#                                     A controller that was down starts with an empty queue: the
#                                     jobs it saved died with it (a restarted machine), yet
#                                     restored they would hold the node for half an hour
#   scripts/slurm_cluster.sh stop     stop the daemons
#   scripts/slurm_cluster.sh status   say whether the cluster answers
# Needs root. One node, "localhost", advertising this machine's cores and most of its memory, in
# partition "cpu" (the default) and "short" (a 1-minute limit, for jobs that cannot start). No
# accounting database (sacct answers nothing; squeue and scontrol do).
set -euo pipefail

CONF=/etc/slurm/slurm.conf
LOGS=/var/log/slurm

install_packages() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return
  echo "installing slurm-wlm and munge (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
}

# The queue is emptied on a fresh start (slurmctld -c), which would number jobs from 1 again;
# a run folder is named by its job id, so a reused id would resume another job's run. Seconds
# since 2026 keep ids growing (Slurm allows up to 67,108,863: until 2028).
first_job_id() { echo $(( $(date +%s) - $(date -d 2026-01-01 +%s) )); }

configure() {
  local cores memory_mb
  cores=$(nproc)
  memory_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOGS"
  cat >"$CONF" <<EOF
ClusterName=local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=300
FirstJobId=$(first_job_id)
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cores RealMemory=$memory_mb State=UNKNOWN
PartitionName=cpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes=localhost MaxTime=1 State=UP
EOF
}

answers() { timeout 5 sinfo -h >/dev/null 2>&1; }
# A daemon that is alive; pgrep alone also finds one that has exited and awaits its parent (a
# zombie), and a start would then leave it out.
running() { pgrep -x -r D,R,S "$1" >/dev/null; }

start() {
  install_packages
  configure
  install -d -o munge -g munge -m 0755 /run/munge
  running munged || runuser -u munge -- /usr/sbin/munged
  if running slurmctld; then scontrol reconfigure; fi
  running slurmctld || slurmctld -c
  running slurmd || slurmd -N localhost
  for _ in $(seq 60); do
    if answers && sinfo -h -o %t | grep -qE '^(idle|mix|alloc)'; then
      scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true
      echo "slurm: node localhost up, $(sinfo -h -N -o '%c CPUs, %m MB' | head -1), partitions $(sinfo -h -o %P | paste -sd' ')"
      return
    fi
    sleep 1
  done
  echo "error: the Slurm node did not come up; see $LOGS/slurmctld.log and $LOGS/slurmd.log" >&2
  exit 1
}

stop() {
  local daemon
  for daemon in slurmd slurmctld munged; do
    pkill -x "$daemon" || continue
    # until it has gone: a start right after must not find it and leave it to exit
    for _ in $(seq 50); do running "$daemon" || continue 2; sleep 0.2; done
    pkill -9 -x "$daemon" || true  # 10 s deaf to SIGTERM (a slurmd that lost munge does that)
  done
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) if answers; then sinfo; else echo "slurm: not running"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
