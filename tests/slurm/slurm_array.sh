#!/bin/bash
# mxlab run --slurm on a real Slurm: starts a single-node cluster on this machine (munged, slurmctld and slurmd
# of Debian's munge and slurm-wlm, everything in a temporary folder, on free ports), submits the job array and
# merge job that `mxlab run FILE --slurm 4` writes, waits for them and checks that the merged folder equals a
# single `mxlab run FILE` byte for byte (every file but the database, provenance, PNG/PDF and results/*.json,
# as the shard test of test_experiment). Stops the daemons and removes the folder however it ends. The daemons
# and jobs run as the user running the test (root in CI; any user works, as jobs run only as that user).
#
# usage: slurm_array.sh MXLAB EXPERIMENT.toml      exit 0 passed, 1 failed, 77 skipped (packages absent)
set -euo pipefail

mxlab=$(realpath "$1")
experiment=$(realpath "$2")
tasks=4
deadline=90  # seconds for the jobs; the cluster needs a few seconds more to start

for tool in munged slurmctld slurmd sbatch squeue sinfo scontrol scancel; do
  if ! command -v "$tool" >/dev/null && ! [ -x "/usr/sbin/$tool" ]; then
    echo "SKIPPED: $tool is not installed (Debian packages slurm-wlm and munge; .ci/setup.sh installs them)"
    exit 77
  fi
done
export PATH="$PATH:/usr/sbin"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
t_start=$(now)

# In /tmp, whatever TMPDIR says: munged wants its socket's folders searchable by everyone and nothing it reads
# writable by others, and a socket's path must stay short (108 bytes).
tmp=$(mktemp -d /tmp/mxlab-slurm.XXXXXX)
chmod 711 "$tmp"
mkdir -m 711 "$tmp/munge"
mkdir -m 700 "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/key"
pids=()
watchdog=""
jobs_submitted=""

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
  if [ -n "$jobs_submitted" ]; then
    scancel $jobs_submitted 2>/dev/null || true
    for _ in $(seq 20); do
      [ -z "$(squeue -h -j "${jobs_submitted// /,}" 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$rc" -ne 0 ]; then
    for f in "$tmp"/log/*.log "$tmp"/munge/munged.log "$tmp"/cluster/slurm/logs/*; do
      [ -f "$f" ] && { echo "--- $f (last lines)"; tail -n 25 "$f"; }
    done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAILED: $*"
  exit 1
}

# A watchdog: if this script is killed outright (SIGKILL: no trap runs), it stops the daemons and removes the folder.
watch_pids() {
  local parent=$$
  (
    trap '' INT
    while kill -0 "$parent" 2>/dev/null; do sleep 1; done
    kill "$@" 2>/dev/null
    sleep 1
    rm -rf "$tmp"
  ) >/dev/null 2>&1 &
  watchdog=$!
}

# Two free TCP ports: no socket uses them (/proc/net/tcp and tcp6 list every socket's ports in hexadecimal).
pick_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    if [ "$p" != "${1:-}" ] && ! cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -qi ":$(printf %04X "$p") "; then
      echo "$p"
      return
    fi
  done
}
ctld_port=$(pick_port)
slurmd_port=$(pick_port "$ctld_port")

# munge: a key of our own, its own socket, pid, log and seed files.
dd if=/dev/urandom of="$tmp/key/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/key/munge.key"
munge_socket="$tmp/munge/munge.socket"
munged --foreground --key-file="$tmp/key/munge.key" --socket="$munge_socket" --pid-file="$tmp/munge/munged.pid" \
  --log-file="$tmp/munge/munged.log" --seed-file="$tmp/munge/munged.seed" >"$tmp/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$munge_socket" ] && break; sleep 0.1; done
[ -S "$munge_socket" ] || fail "munged did not create its socket"

user=$(id -un)
node=$(hostname -s)
export SLURM_CONF="$tmp/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=mxlabtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_min_interval=0
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=mxlabtest Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF

slurmctld -D -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$node" >"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)
watch_pids "${pids[@]}"

# The node registers with the controller: idle in sinfo.
state=""
for _ in $(seq 150); do
  state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.2
done
[ "$state" = idle ] || fail "the node did not become idle (sinfo: '${state}')"
echo "cluster up in $(since "$t_start") s: node $node, ports $ctld_port (slurmctld) and $slurmd_port (slurmd)"

# The reference: one run of the whole experiment.
t=$(now)
"$mxlab" run "$experiment" --out "$tmp/single" --quiet >/dev/null
echo "single run: $(since "$t") s"

# The scripts, written from another folder than the results (they hold absolute paths), then submitted.
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
"$mxlab" run "$experiment" --slurm "$tasks" --out "$tmp/cluster" --quiet
for f in submit.sh slurm/array.sbatch slurm/merge.sbatch; do [ -f "$tmp/cluster/$f" ] || fail "no $f written"; done
t_submit=$(now)
submitted=$(sh "$tmp/cluster/submit.sh")
echo "$submitted"
array=$(sed -n 's/^array job \([0-9]*\) .*/\1/p' <<<"$submitted")
merge=$(sed -n 's/.*merge job \([0-9]*\);.*/\1/p' <<<"$submitted")
[ -n "$array" ] && [ -n "$merge" ] || fail "submit.sh did not name the array and merge jobs"
jobs_submitted="$array $merge"

# Waits for the array's tasks, then for the merge; any task ending otherwise than COMPLETED fails the test.
array_time=""
while :; do
  states=$(scontrol show job "$array" -o 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 | sort | uniq -c | tr -s ' \n' ' ')
  merge_state=$(scontrol show job "$merge" -o 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  if [ -z "$array_time" ] && [ "$(scontrol show job "$array" -o | grep -c 'JobState=COMPLETED')" -eq "$tasks" ]; then
    array_time=$(since "$t_submit")
    echo "array job $array: $tasks tasks COMPLETED $array_time s after submission"
  fi
  case "$states $merge_state" in
    *FAIL* | *CANCEL* | *TIMEOUT* | *PREEMPT* | *OUT_OF_ME* | *DEADLINE*) fail "jobs ended badly: array [$states], merge $merge_state" ;;
  esac
  [ "$merge_state" = COMPLETED ] && break
  awk -v a="$t_submit" -v b="$(now)" -v d="$deadline" 'BEGIN { exit !(b - a > d) }' &&
    fail "jobs not done $deadline s after submission: array [$states], merge $merge_state"
  sleep 0.25
done
echo "merge job $merge: COMPLETED $(since "$t_submit") s after submission"
for k in $(seq 0 $((tasks - 1))); do [ -f "$tmp/cluster/shard-$k/results.sqlite" ] || fail "shard-$k holds no database"; done

# Byte for byte: the same files (those the shard test of test_experiment compares; not the folder's lock file),
# the same bytes.
compared_files() {
  (cd "$1" && find . -path ./shard-\* -prune -o -path ./slurm -prune -o -type f -print | sed 's|^\./||' |
    grep -Ev '(^|/)(results\.sqlite.*|provenance\.json|submit\.sh|\..*)$|\.(png|pdf)$|(^|/)results/[^/]*\.json$' | sort)
}
compared_files "$tmp/single" >"$tmp/single.list"
compared_files "$tmp/cluster" >"$tmp/cluster.list"
diff "$tmp/single.list" "$tmp/cluster.list" >/dev/null || {
  diff "$tmp/single.list" "$tmp/cluster.list" || true
  fail "the merged folder holds other files than the single run's"
}
[ "$(grep -c . "$tmp/single.list")" -ge 8 ] || fail "too few files compared: $(tr '\n' ' ' <"$tmp/single.list")"
bytes=0
while read -r f; do
  cmp "$tmp/single/$f" "$tmp/cluster/$f" || fail "$f differs between the single run and the merged shards"
  bytes=$((bytes + $(stat -c %s "$tmp/single/$f")))
done <"$tmp/single.list"
echo "identical, byte for byte: $(grep -c . "$tmp/single.list") files, $bytes bytes ($(grep -c '^tables/' "$tmp/single.list") table files):"
sed 's/^/  /' "$tmp/single.list"
echo "passed in $(since "$t_start") s"
