#!/usr/bin/env bash
# A throwaway Slurm cluster on this one machine, for trying scripts/slurm/tunelab.sbatch
# (and for tests/distributed/test_slurm.py): munged, slurmctld and two slurmd daemons
# ("node1", "node2", both on 127.0.0.1) with their config, state, logs and sockets all
# inside one folder. Needs root and Debian's slurm-wlm + munge (scripts/install_system_deps.sh).
#
#   scripts/slurm/local_cluster.sh start DIR   # prints `export SLURM_CONF=DIR/slurm.conf`
#   SLURM_CONF=DIR/slurm.conf sbatch ...       # squeue, sacct-less: scontrol show job
#   scripts/slurm/local_cluster.sh stop DIR
#
# Nothing under /etc is touched: the daemons read DIR/slurm.conf and talk to the munged
# started here through DIR/munge.socket. Ports: slurmctld 6817 + offset, slurmd after it
# (offset from SLURM_LOCAL_PORT_BASE, default 16817), so a real cluster's are not taken.
set -euo pipefail

action=${1:?usage: local_cluster.sh start|stop DIR}
dir=$(realpath -m "${2:?usage: local_cluster.sh start|stop DIR}")
base=${SLURM_LOCAL_PORT_BASE:-16817}
cpus=${SLURM_LOCAL_CPUS_PER_NODE:-1}

stop() {
  for name in slurmd-node1 slurmd-node2 slurmctld munged; do
    if [ -f "$dir/$name.pid" ]; then
      kill "$(cat "$dir/$name.pid")" 2>/dev/null || true
    fi
  done
  # Give them a moment to go so a restart in the same folder finds its ports free.
  for _ in $(seq 50); do
    alive=0
    for name in slurmd-node1 slurmd-node2 slurmctld munged; do
      [ -f "$dir/$name.pid" ] && kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null && alive=1
    done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  rm -f "$dir"/*.pid
}

if [ "$action" = stop ]; then stop; exit 0; fi
[ "$action" = start ] || { echo "usage: local_cluster.sh start|stop DIR" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "local_cluster.sh: slurmd must run as root (it starts jobs as their users)" >&2; exit 2; }
for tool in munged slurmctld slurmd sbatch scontrol; do
  command -v "$tool" >/dev/null || { echo "local_cluster.sh: $tool is missing; run scripts/install_system_deps.sh" >&2; exit 2; }
done

mkdir -p "$dir/state" "$dir/spool" "$dir/log"
chmod 0700 "$dir"
# munged insists on a key only its owner can read and on private folders.
if [ ! -f "$dir/munge.key" ]; then
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
fi
chmod 0400 "$dir/munge.key"
munged --force --socket="$dir/munge.socket" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/munged.seed"

cat > "$dir/slurm.conf" <<CONF
ClusterName=tunelab-local
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
# No cgroups in a container: track job processes by their parent chain.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MessageTimeout=10
KillWait=30
InactiveLimit=0
NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 1)) CPUs=$cpus RealMemory=1000 State=UNKNOWN
NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 2)) CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
CONF

export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF" -i
slurmd -f "$SLURM_CONF" -N node1
slurmd -f "$SLURM_CONF" -N node2
# Ready when both nodes take jobs.
for _ in $(seq 300); do
  if [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" = 2 ]; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.1
done
echo "local_cluster.sh: the two nodes did not come up within 30 s; see $dir/log" >&2
sinfo -N >&2 || true
stop
exit 1
