#!/usr/bin/env bash
# Single-node Slurm cluster (slurmctld + slurmd + slurmdbd/MariaDB + munge) for
# rlsuite's tests, on Debian 12 as root, without systemd.
#
#   bash scripts/slurm/cluster.sh install   # apt packages (idempotent)
#   bash scripts/slurm/cluster.sh start     # configs + daemons, waits until usable
#   bash scripts/slurm/cluster.sh status    # daemons, sinfo
#   bash scripts/slurm/cluster.sh stop      # stops all daemons it started
#
# Daemons are started directly (not via init scripts / systemd, which may be
# blocked by /usr/sbin/policy-rc.d or absent).  See README.md beside this file.
set -euo pipefail

# ----------------------------------------------------------------------------
# Settings (overridable from the environment)
# ----------------------------------------------------------------------------
CLUSTER_NAME="${SLURM_CLUSTER_NAME:-rlsuite}"
PARTITION="${SLURM_PARTITION_NAME:-debug}"
TIMEOUT="${SLURM_START_TIMEOUT:-90}"          # seconds to wait for each daemon
DEF_MEM_PER_CPU="${SLURM_DEF_MEM_PER_CPU:-}"  # MB; default: RealMemory/CPUs/2, max 4096
NODE_CPUS="${SLURM_NODE_CPUS:-}"              # advertise more CPUs than the machine has
DB_NAME=slurm_acct_db
DB_USER=slurm
DB_PASS="${SLURM_DB_PASS:-rlsuite-slurmdbd}"

PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)

ETC=/etc/slurm
LOGDIR=/var/log/slurm
RUNDIR=/run/slurm
CTLD_SPOOL=/var/spool/slurmctld
SLURMD_SPOOL=/var/spool/slurmd

MUNGE_KEY=/etc/munge/munge.key
MUNGE_PID=/run/munge/munged.pid
MUNGE_SOCK=/run/munge/munge.socket.2
MUNGE_LOG=/var/log/munge/munged.log
MYSQL_PID=/run/mysqld/mysqld.pid
MYSQL_SOCK=/run/mysqld/mysqld.sock
MYSQL_LOG=$LOGDIR/mariadb.log
DBD_PID=$RUNDIR/slurmdbd.pid
CTLD_PID=$RUNDIR/slurmctld.pid
SLURMD_PID=$RUNDIR/slurmd.pid
DBD_LOG=$LOGDIR/slurmdbd.log
CTLD_LOG=$LOGDIR/slurmctld.log
SLURMD_LOG=$LOGDIR/slurmd.log

# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------
log()  { printf '[slurm-cluster] %s\n' "$*"; }
warn() { printf '[slurm-cluster] WARNING: %s\n' "$*" >&2; }
die()  { printf '[slurm-cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# fail_log LOGFILE MESSAGE -- error message, then the tail of the daemon's log.
fail_log() { printf '[slurm-cluster] ERROR: %s\n' "$2" >&2; show_log_tail "$1"; exit 1; }

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root"; }

show_log_tail() {  # file [lines]
  local f=$1 n=${2:-40}
  if [[ -s $f ]]; then
    printf '[slurm-cluster] ---- last %s lines of %s ----\n' "$n" "$f" >&2
    tail -n "$n" "$f" >&2 || true
    printf '[slurm-cluster] ---- end of %s ----\n' "$f" >&2
  else
    printf '[slurm-cluster] (log %s is empty or missing)\n' "$f" >&2
  fi
}

# wait_until DESC LOGFILE PROC CMD...  -- polls CMD until it succeeds or
# TIMEOUT.  PROC ("name:pidfile" or "") is a daemon that must stay alive while
# we wait: if it has died, fail at once instead of waiting for the timeout.
wait_until() {
  local desc=$1 logf=$2 proc=$3; shift 3
  local start=$SECONDS deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [[ -n $proc ]] && ((SECONDS - start >= 2)) && ! is_running "${proc%%:*}" "${proc#*:}"; then
      printf '[slurm-cluster] ERROR: %s exited while waiting for %s\n' "${proc%%:*}" "$desc" >&2
      show_log_tail "$logf"
      exit 1
    fi
    sleep 1
  done
  printf '[slurm-cluster] ERROR: timed out after %ss waiting for %s\n' "$TIMEOUT" "$desc" >&2
  show_log_tail "$logf"
  exit 1
}

# pid_of NAME PIDFILE -> prints the pid of a live process called NAME.
# Uses the pid file if it is valid; removes it when stale; falls back to an
# exact-name process lookup (daemons started without/with a lost pid file).
pid_of() {
  local name=$1 pidfile=$2 pid=""
  if [[ -f $pidfile ]]; then
    pid=$(tr -dc '0-9' <"$pidfile" 2>/dev/null || true)
    if [[ -n $pid && -r /proc/$pid/comm && $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]]; then
      echo "$pid"; return 0
    fi
    rm -f "$pidfile"   # stale
  fi
  pid=$(pgrep -x -o "$name" 2>/dev/null || true)
  [[ -n $pid ]] && { echo "$pid"; return 0; }
  return 1
}

is_running() { pid_of "$1" "$2" >/dev/null; }

# kill_daemon NAME PIDFILE -- TERM, wait up to 20 s, then KILL.
kill_daemon() {
  local name=$1 pidfile=$2 pid
  pid=$(pid_of "$name" "$pidfile") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; log "stopped $name (pid $pid)"; return 0; }
    sleep 0.5
  done
  warn "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

# Run a detached background command (new session, no inherited fds; fd 9 is
# the cluster.sh lock and must not be held by the daemons).
spawn() { setsid "$@" </dev/null >/dev/null 2>&1 9>&- & disown || true; }

node_name() { hostname -s; }

# ----------------------------------------------------------------------------
# install
# ----------------------------------------------------------------------------
missing_packages() {
  local p st
  for p in "${PACKAGES[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ $st == installed ]] || echo "$p"
  done
}

cmd_install() {
  need_root
  local missing
  missing=$(missing_packages | tr '\n' ' ')
  if [[ -z ${missing// /} ]]; then
    log "packages already installed: ${PACKAGES[*]}"
    return 0
  fi
  log "installing: $missing"
  export DEBIAN_FRONTEND=noninteractive
  local out; out=$(mktemp)
  # shellcheck disable=SC2086
  if ! apt-get install -y -qq --no-install-recommends $missing >"$out" 2>&1; then
    log "apt-get install failed; running apt-get update and retrying"
    apt-get update -qq >>"$out" 2>&1 || true
    # shellcheck disable=SC2086
    if ! apt-get install -y -qq --no-install-recommends $missing >>"$out" 2>&1; then
      tail -n 40 "$out" >&2; rm -f "$out"; die "apt-get install failed"
    fi
  fi
  rm -f "$out"
  missing=$(missing_packages | tr '\n' ' ')
  [[ -z ${missing// /} ]] || die "still missing after install: $missing"
  log "installed: ${PACKAGES[*]}"
}

# ----------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------
ensure_hostname_resolves() {
  local h; h=$(node_name)
  [[ -n $h ]] || die "hostname -s returned nothing"
  if ! getent hosts "$h" >/dev/null 2>&1; then
    log "hostname '$h' does not resolve; adding it to /etc/hosts"
    printf '127.0.0.1\t%s\n' "$h" >>/etc/hosts
  fi
  getent hosts "$h" >/dev/null 2>&1 || die "hostname '$h' still does not resolve"
}

make_dirs() {
  mkdir -p "$ETC" "$LOGDIR" "$RUNDIR" "$CTLD_SPOOL" "$SLURMD_SPOOL"
  chmod 755 "$LOGDIR" "$RUNDIR" "$CTLD_SPOOL" "$SLURMD_SPOOL"
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge /etc/munge
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o mysql -g mysql -m 0755 /run/mysqld
  touch "$MYSQL_LOG"; chown mysql:mysql "$MYSQL_LOG"
  touch "$MUNGE_LOG"; chown munge:munge "$MUNGE_LOG"; chmod 0640 "$MUNGE_LOG"
}

# write_if_changed DEST MODE  (content on stdin); returns 0 if changed.
write_if_changed() {
  local dest=$1 mode=$2 tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if [[ -f $dest ]] && cmp -s "$tmp" "$dest"; then
    rm -f "$tmp"; chmod "$mode" "$dest"; return 1
  fi
  install -m "$mode" -o root -g root "$tmp" "$dest"
  rm -f "$tmp"
  return 0
}

node_line() {
  # First line of `slurmd -C`, e.g.
  # NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24036
  local out line
  out=$(slurmd -C 2>&1) || die "'slurmd -C' failed: $out"
  line=$(grep -m1 '^NodeName=' <<<"$out") || die "no NodeName line in 'slurmd -C' output: $out"
  # Force the node name to match `hostname -s` (what slurmd registers as).
  line=$(sed -E "s/^NodeName=[^ ]+/NodeName=$(node_name)/" <<<"$line")
  if [[ -n $NODE_CPUS ]]; then
    # Oversubscribe: N single-core "CPUs" on one socket (needs config_overrides).
    [[ $NODE_CPUS =~ ^[1-9][0-9]*$ ]] || die "SLURM_NODE_CPUS must be a positive integer"
    line=$(sed -E -e "s/CPUs=[0-9]+/CPUs=$NODE_CPUS/" -e "s/Boards=[0-9]+/Boards=1/" \
      -e "s/SocketsPerBoard=[0-9]+/SocketsPerBoard=1/" -e "s/CoresPerSocket=[0-9]+/CoresPerSocket=$NODE_CPUS/" \
      -e "s/ThreadsPerCore=[0-9]+/ThreadsPerCore=1/" <<<"$line")
  fi
  echo "$line"
}

write_configs() {  # sets CONFIG_CHANGED=1 if slurm.conf/slurmdbd.conf changed
  local h nl cpus mem defmem
  h=$(node_name)
  nl=$(node_line)
  cpus=$(grep -oE 'CPUs=[0-9]+' <<<"$nl" | cut -d= -f2)
  mem=$(grep -oE 'RealMemory=[0-9]+' <<<"$nl" | cut -d= -f2)
  defmem=$DEF_MEM_PER_CPU
  if [[ -z $defmem ]]; then
    # Half the node's memory split over its CPUs, at most 4 GiB per CPU.
    defmem=$(( mem / cpus / 2 ))
    (( defmem > 4096 )) && defmem=4096
    (( defmem < 100 )) && defmem=100
  fi
  CONFIG_CHANGED=0

  if write_if_changed "$ETC/slurm.conf" 0644 <<EOF
# Generated by scripts/slurm/cluster.sh -- do not edit by hand.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$h
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Short job-credential lifetime: a requeued job may restart after 10 s, not 120 s.
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
JobRequeue=1
MailProg=/bin/true
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$CTLD_SPOOL
SlurmdSpoolDir=$SLURMD_SPOOL
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$SLURMD_LOG
SlurmctldDebug=info
SlurmdDebug=info
# Fast cancel / requeue / scheduling.
KillWait=5
InactiveLimit=0
MinJobAge=300
Waittime=0
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$defmem
# Accounting through slurmdbd (sacct is what submitit uses to read job states).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$h
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
${NODE_CPUS:+SlurmdParameters=config_overrides
}$nl State=UNKNOWN
PartitionName=$PARTITION Nodes=$h Default=YES MaxTime=INFINITE State=UP
EOF
  then CONFIG_CHANGED=1; log "wrote $ETC/slurm.conf"; fi

  # slurmdbd refuses a slurmdbd.conf readable by others.
  if write_if_changed "$ETC/slurmdbd.conf" 0600 <<EOF
# Generated by scripts/slurm/cluster.sh -- do not edit by hand.
AuthType=auth/munge
DbdHost=$h
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$DBD_LOG
PidFile=$DBD_PID
StorageType=accounting_storage/mysql
StorageHost=localhost
StoragePort=3306
StorageLoc=$DB_NAME
StorageUser=$DB_USER
StoragePass=$DB_PASS
EOF
  then CONFIG_CHANGED=1; log "wrote $ETC/slurmdbd.conf"; fi
}

# ----------------------------------------------------------------------------
# daemons
# ----------------------------------------------------------------------------
munge_ok() { munge -n -S "$MUNGE_SOCK" 2>/dev/null | unmunge -S "$MUNGE_SOCK" >/dev/null 2>&1; }

start_munge() {
  if [[ ! -s $MUNGE_KEY ]]; then
    log "creating munge key"
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile="$MUNGE_KEY" --force
    else
      dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
    fi
  fi
  chown munge:munge "$MUNGE_KEY"; chmod 0400 "$MUNGE_KEY"
  if is_running munged "$MUNGE_PID" && munge_ok; then return 0; fi
  kill_daemon munged "$MUNGE_PID"
  rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PID" --socket="$MUNGE_SOCK" \
      --log-file="$MUNGE_LOG" </dev/null >/dev/null 2>>"$MUNGE_LOG" 9>&- \
    || fail_log "$MUNGE_LOG" "munged failed to start"
  wait_until "munge" "$MUNGE_LOG" "munged:$MUNGE_PID" munge_ok
}

mysql_ok() { mariadb-admin --socket="$MYSQL_SOCK" ping >/dev/null 2>&1; }

start_mariadb() {
  if ! mysql_ok; then
    kill_daemon mariadbd "$MYSQL_PID"
    if [[ ! -d /var/lib/mysql/mysql ]]; then
      log "initialising MariaDB data directory"
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>"$MYSQL_LOG" 2>&1 \
        || fail_log "$MYSQL_LOG" "mariadb-install-db failed"
    fi
    rm -f "$MYSQL_SOCK"
    log "starting mariadbd"
    # Native AIO / io_uring are not available in every sandbox; not needed here.
    spawn /usr/sbin/mariadbd --user=mysql --pid-file="$MYSQL_PID" --socket="$MYSQL_SOCK" \
      --bind-address=127.0.0.1 --log-error="$MYSQL_LOG" --innodb-use-native-aio=0
    wait_until "mariadb" "$MYSQL_LOG" "mariadbd:$MYSQL_PID" mysql_ok
  fi
  # Database and user for slurmdbd (idempotent).
  mariadb --socket="$MYSQL_SOCK" -u root <<EOF || fail_log "$MYSQL_LOG" "could not create the accounting database"
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
FLUSH PRIVILEGES;
EOF
}

dbd_ok() { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }

start_slurmdbd() {
  if is_running slurmdbd "$DBD_PID" && dbd_ok; then :; else
    kill_daemon slurmdbd "$DBD_PID"
    log "starting slurmdbd"
    slurmdbd </dev/null >/dev/null 2>>"$DBD_LOG" 9>&- || fail_log "$DBD_LOG" "slurmdbd failed to start"
    wait_until "slurmdbd (sacctmgr show cluster)" "$DBD_LOG" "slurmdbd:$DBD_PID" dbd_ok
  fi
  if ! sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
    log "registering cluster '$CLUSTER_NAME' in slurmdbd"
    sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null || die "sacctmgr add cluster failed"
  fi
}

ctld_ok() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_slurmctld() {
  if is_running slurmctld "$CTLD_PID" && ctld_ok; then return 0; fi
  kill_daemon slurmctld "$CTLD_PID"
  # slurmctld refuses to start if ClusterName changed since the state was saved.
  if [[ -f $CTLD_SPOOL/clustername && $(cat "$CTLD_SPOOL/clustername") != "$CLUSTER_NAME" ]]; then
    warn "ClusterName changed ($(cat "$CTLD_SPOOL/clustername") -> $CLUSTER_NAME); discarding old slurmctld state"
    rm -f "$CTLD_SPOOL/clustername"
  fi
  log "starting slurmctld"
  slurmctld </dev/null >/dev/null 2>>"$CTLD_LOG" 9>&- || fail_log "$CTLD_LOG" "slurmctld failed to start"
  wait_until "slurmctld (scontrol ping)" "$CTLD_LOG" "slurmctld:$CTLD_PID" ctld_ok
}

node_state() { sinfo -h -N -n "$(node_name)" -o '%T' 2>/dev/null | head -n1; }
node_ready() { [[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]; }
sacct_ok() { sacct -n -X -S now-1minute >/dev/null 2>&1; }

start_slurmd() {
  if ! is_running slurmd "$SLURMD_PID"; then
    log "starting slurmd"
    slurmd </dev/null >/dev/null 2>>"$SLURMD_LOG" 9>&- || fail_log "$SLURMD_LOG" "slurmd failed to start"
  fi
  # A node left down/drained by an earlier crash: bring it back.
  local deadline=$((SECONDS + TIMEOUT)) st
  while ((SECONDS < deadline)); do
    st=$(node_state)
    node_ready && break
    if ! is_running slurmd "$SLURMD_PID"; then
      printf '[slurm-cluster] ERROR: slurmd exited while waiting for the node to be idle\n' >&2
      show_log_tail "$SLURMD_LOG"; exit 1
    fi
    if [[ $st =~ (down|drain|fail) ]]; then
      scontrol update NodeName="$(node_name)" State=RESUME >/dev/null 2>&1 || true
    fi
    sleep 1
  done
  if ! node_ready; then
    printf '[slurm-cluster] ERROR: node %s not idle after %ss (state: %s)\n' \
      "$(node_name)" "$TIMEOUT" "${st:-unknown}" >&2
    scontrol show node "$(node_name)" >&2 2>/dev/null || true
    show_log_tail "$SLURMD_LOG"; show_log_tail "$CTLD_LOG" 20
    exit 1
  fi
}

cluster_up() {
  munge_ok && mysql_ok && is_running slurmdbd "$DBD_PID" && is_running slurmctld "$CTLD_PID" \
    && is_running slurmd "$SLURMD_PID" && ctld_ok && node_ready && sacct_ok
}

cmd_start() {
  need_root
  [[ -z $(missing_packages) ]] || die "packages missing; run: bash $0 install"
  local t0=$SECONDS
  ensure_hostname_resolves
  make_dirs
  write_configs
  if [[ $CONFIG_CHANGED == 0 ]] && cluster_up; then
    log "cluster already up (node $(node_name): $(node_state)); nothing to do"
    return 0
  fi
  if [[ $CONFIG_CHANGED == 1 ]] && { is_running slurmctld "$CTLD_PID" || is_running slurmd "$SLURMD_PID" || is_running slurmdbd "$DBD_PID"; }; then
    log "configuration changed; restarting Slurm daemons"
    stop_slurm
  fi
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  start_slurmd
  wait_until "sacct" "$DBD_LOG" "slurmdbd:$DBD_PID" sacct_ok
  log "cluster up in $((SECONDS - t0))s: node $(node_name) $(node_state), partition $PARTITION, cluster $CLUSTER_NAME"
}

stop_slurm() {
  if ctld_ok; then scontrol shutdown >/dev/null 2>&1 || true; fi
  kill_daemon slurmd "$SLURMD_PID"
  kill_daemon slurmctld "$CTLD_PID"
  kill_daemon slurmdbd "$DBD_PID"
}

cmd_stop() {
  need_root
  stop_slurm
  if mysql_ok; then
    mariadb-admin --socket="$MYSQL_SOCK" shutdown >/dev/null 2>&1 || true
  fi
  kill_daemon mariadbd "$MYSQL_PID"
  kill_daemon munged "$MUNGE_PID"
  log "cluster stopped"
}

cmd_status() {
  local rc=0 pid
  for d in "munged:$MUNGE_PID" "mariadbd:$MYSQL_PID" "slurmdbd:$DBD_PID" "slurmctld:$CTLD_PID" "slurmd:$SLURMD_PID"; do
    if pid=$(pid_of "${d%%:*}" "${d#*:}"); then
      printf '  %-10s running (pid %s)\n' "${d%%:*}" "$pid"
    else
      printf '  %-10s stopped\n' "${d%%:*}"; rc=1
    fi
  done
  if ctld_ok; then sinfo 2>/dev/null || true; else echo "  slurmctld not answering"; rc=1; fi
  if sacct_ok; then echo "  sacct: ok"; else echo "  sacct: not answering"; rc=1; fi
  if ((rc == 0)); then log "cluster is up"; else log "cluster is NOT (fully) up"; fi
  return $rc
}

# Serialise concurrent invocations (several engineers / test runs on one machine).
if [[ ${1:-} =~ ^(install|start|stop|restart)$ ]]; then
  need_root
  { exec 9>/run/lock/rlsuite-slurm-cluster.lock; } 2>/dev/null || exec 9>/tmp/rlsuite-slurm-cluster.lock
  flock -w 300 9 || die "another cluster.sh has held its lock for 300 s; giving up"
fi

case "${1:-}" in
  install) cmd_install ;;
  start)   cmd_start ;;
  stop)    cmd_stop ;;
  restart) cmd_stop; cmd_start ;;
  status)  cmd_status ;;
  *) echo "usage: $0 {install|start|stop|restart|status}" >&2; exit 2 ;;
esac
