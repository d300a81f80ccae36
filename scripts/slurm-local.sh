#!/usr/bin/env bash
# Automatic allocation against a real Slurm: a one-node Slurm cluster on this machine (Debian's
# slurmctld + slurmd + munge, its configuration in a scratch directory), a hetsched server with two
# `[[allocation]]` queues, and the checks of docs/runtime.md "Automatic allocation":
#   1. `hetsched allocations --check`: the good queue passes `sbatch --test-only`, the one with a
#      wrong partition fails and the command exits 1;
#   2. six 2-second tasks and no agent: the server submits allocations (at most `max_allocations`),
#      their agents (named HOST-JOBID) run every task, knowing the allocation's time left;
#   3. idle for `idle_timeout`, the agents exit, Slurm ends the allocations, and `hetsched nodes`
#      lists none of them (`--all`: `left (idle-timeout)`, not DEAD);
#   4. `--pause`: a task waits and says why, no allocation; `--resume`: one allocation runs it.
# Needs root (the daemons) and Debian's packages (installed if missing). Not run by CI.
#
#   scripts/slurm-local.sh [HETSCHED_BINARY]      (default target/release/hetsched)
set -euo pipefail

BIN=$(realpath "${1:-target/release/hetsched}")
[ -x "$BIN" ] || { echo "no hetsched binary at $BIN (cargo build --release -p hetsched-cli)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root: it starts slurmctld and slurmd" >&2; exit 2; }
if pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; then
  echo "a Slurm daemon already runs here: stop it first" >&2
  exit 2
fi
if ! command -v slurmctld >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y slurmctld slurmd slurm-client munge >/dev/null
fi

W=$(mktemp -d /tmp/hetsched-slurm.XXXXXX)
HOST=$(hostname -s)
CPUS=$(nproc)
mkdir -p "$W/ctld" "$W/d" "$W/hs"
cat >"$W/slurm.conf" <<EOF
ClusterName=hetsched-local
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmdSpoolDir=$W/d
StateSaveLocation=$W/ctld
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=5
MinJobAge=30
NodeName=$HOST CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
# Slurm reads cgroup.conf beside slurm.conf; v1 is what Debian's slurmd loads without systemd.
echo "CgroupPlugin=cgroup/v1" >"$W/cgroup.conf"
export SLURM_CONF=$W/slurm.conf

SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  scancel --user=root 2>/dev/null || true
  sleep 1
  [ -f "$W/slurmd.pid" ] && kill "$(cat "$W/slurmd.pid")" 2>/dev/null || true
  [ -f "$W/slurmctld.pid" ] && kill "$(cat "$W/slurmctld.pid")" 2>/dev/null || true
  echo "(work directory: $W)"
}
trap cleanup EXIT

# A munged that ran as root before leaves its socket, lock and log owned by root: munge's own
# munged then refuses to start.
pgrep -x munged >/dev/null || {
  mkdir -p /run/munge /var/log/munge && rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  touch /var/log/munge/munged.log && chown munge:munge /run/munge /var/log/munge /var/log/munge/munged.log
  runuser -u munge -- /usr/sbin/munged
}
slurmctld -f "$W/slurm.conf"
slurmd -f "$W/slurm.conf"
for _ in $(seq 60); do
  sinfo --noheader --format %T 2>/dev/null | grep -qx idle && break
  sleep 1
done
sinfo --noheader --format %T | grep -qx idle || { echo "Slurm's node did not come up: see $W/slurmd.log" >&2; exit 1; }
echo "Slurm $(sinfo --version | awk '{print $2}'): one node ($HOST, $CPUS CPUs), partition debug"

cat >"$W/server.toml" <<EOF
listen = "127.0.0.1:7620"
data_dir = "$W/hs"
[[allocation]]
name = "debug"
manager = "slurm"
time_limit = "10m"
max_allocations = 2
backlog = 2
idle_timeout = "5s"
refresh = "2s"
args = ["--partition=debug"]
attributes = ["local"]
agent_args = ["--cores", "1"]
[[allocation]]
name = "wrong"
manager = "slurm"
time_limit = "10m"
args = ["--partition=nope"]
attributes = ["never"]
EOF
"$BIN" server --config "$W/server.toml" >"$W/server.log" 2>&1 &
SERVER_PID=$!
export HETSCHED_SERVER=http://127.0.0.1:7620 HETSCHED_TOKEN_FILE=$W/hs/token
for _ in $(seq 50); do [ -f "$W/hs/token" ] && break; sleep 0.1; done
fail() { echo "FAILED: $*" >&2; exit 1; }

echo "1. hetsched allocations --check"
set +e
check=$("$BIN" allocations --check 2>&1)
rc=$?
set -e
echo "$check" | sed 's/^/   /'
[ "$rc" = 1 ] || fail "--check exited $rc, not 1"
echo "$check" | grep -q "^debug: ok: sbatch: Job .* to start at" || fail "the debug queue did not pass"
echo "$check" | grep -q "^wrong: FAILED: .*invalid partition specified: nope" || fail "the wrong queue passed"

echo "2. six 2-second tasks, no agent"
"$BIN" submit --tasks 6 -- sleep 2 >/dev/null
"$BIN" wait 1 --timeout 120s | sed 's/^/   /'
allocations=$(grep -c "submitted an allocation" "$W/server.log")
echo "   allocations submitted: $allocations"
[ "$allocations" -ge 1 ] && [ "$allocations" -le 2 ] || fail "$allocations allocations"
nodes=$("$BIN" tasks --job 1 --output json | grep -o '"node": *"[^"]*"' | sort -u | sed 's/.*: *//' | tr '\n' ' ')
echo "   tasks ran on: $nodes"
echo "$nodes" | grep -q "\"$HOST-[0-9]*\"" || fail "no task ran on an allocation's agent"
grep -h "agent starting" "$W"/hs/allocations/debug/*.out | grep -q "time_limit=" || fail "the agents did not know their time left"
grep -h "agent starting" "$W"/hs/allocations/debug/*.out | sed 's/.*\(name=[^ ]*\).*\(time_limit=[^ ]*\).*/   agent \1 \2/'

echo "3. idle: the agents leave and Slurm ends the allocations"
# This private cluster runs nothing else: every job in it is an allocation.
for _ in $(seq 60); do
  [ -z "$(squeue --noheader)" ] && break
  sleep 1
done
[ -z "$(squeue --noheader)" ] || fail "allocations still in Slurm: $(squeue --noheader)"
listed=$("$BIN" nodes --output json)
[ "$listed" = "[]" ] || fail "hetsched nodes still lists $listed"
"$BIN" nodes --all | grep -c "left (idle-timeout)" | sed 's/^/   nodes left (idle-timeout): /'
"$BIN" nodes --all | grep -q DEAD && fail "a node is DEAD"

echo "4. a paused queue submits nothing; resumed, one task brings one allocation"
"$BIN" allocations --pause debug | sed 's/^/   /'
# Only the debug queue's agents offer `local`: the wrong queue cannot serve it.
"$BIN" submit --requires local -- sleep 1 >/dev/null
sleep 6
[ "$(grep -c "submitted an allocation" "$W/server.log")" = "$allocations" ] || fail "a paused queue submitted"
reason=$("$BIN" job 2 | grep "pending because")
echo "$reason" | sed 's/^ */   /'
echo "$reason" | grep -q "queue \`debug\`, whose agents could, is paused" || fail "the job did not say the queue is paused"
"$BIN" allocations --resume debug | sed 's/^/   /'
"$BIN" wait 2 --timeout 120s | sed 's/^/   /'
more=$(( $(grep -c "submitted an allocation" "$W/server.log") - allocations ))
echo "   allocations submitted for it: $more"
[ "$more" = 1 ] || fail "$more allocations for one task"
echo "every check passed"
