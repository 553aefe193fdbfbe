# Helpers shared by scripts/test, scripts/quickstart and the benchmark harnesses. Source it;
# do not run it.
# shellcheck shell=bash

# Prints a step header on stderr, so that captured stdout stays clean.
say() {
    printf '\n==> %s\n' "$*" >&2
}

die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

is_root() {
    [ "$(id -u)" -eq 0 ]
}

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
    if is_root; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run '$*', and sudo is not installed"
    fi
}

# The directory holding initdb and pg_ctl: PATH first, then Debian's versioned
# directories (newest first). Fails when PostgreSQL's server binaries are absent.
pg_bindir() {
    local initdb dir
    if initdb=$(command -v initdb 2>/dev/null) && [ -x "$(dirname "$initdb")/pg_ctl" ]; then
        dirname "$initdb"
        return 0
    fi
    while IFS= read -r dir; do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done < <(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -rV)
    return 1
}

# Installs Debian's postgresql unless initdb is already there; sets PG_BIN.
ensure_postgresql() {
    if ! PG_BIN=$(pg_bindir); then
        say "PostgreSQL server binaries not found; installing Debian's postgresql"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql
        PG_BIN=$(pg_bindir) || die "postgresql was installed but initdb is still missing"
    fi
    export PG_BIN
}

# PostgreSQL refuses to run as root: when we are root, make sure the `postgres` user
# exists to run the clusters (Debian's postgresql package normally creates it).
ensure_postgres_user() {
    is_root || return 0
    if ! getent passwd postgres >/dev/null; then
        say "creating the postgres system user"
        useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
    fi
}

# The MariaDB server program: PATH first, then /usr/sbin (Debian puts mariadbd there,
# outside a normal user's PATH). Fails when it is absent.
mariadbd_path() {
    local found
    if found=$(command -v mariadbd 2>/dev/null); then
        echo "$found"
    elif [ -x /usr/sbin/mariadbd ]; then
        echo /usr/sbin/mariadbd
    else
        return 1
    fi
}

have_mariadb() {
    mariadbd_path >/dev/null && command -v mariadb-install-db >/dev/null 2>&1 &&
        command -v mariadb >/dev/null 2>&1
}

# Installs Debian's mariadb-server (the server, mariadb-install-db and the mariadb
# client) unless they are already there; sets MARIADBD to the server program. The tests
# start throwaway servers of their own (tests/common/maria.rs), so the package's system
# service must not run: a policy-rc.d answering 101 keeps its postinst from starting it
# (which also spares a machine without systemd a failed install), one started anyway is
# stopped, and under systemd the service is disabled.
ensure_mariadb() {
    if ! have_mariadb; then
        say "MariaDB server or client not found; installing Debian's mariadb-server"
        local policy=/usr/sbin/policy-rc.d saved="" status=0
        if [ -e "$policy" ]; then
            saved=$(as_root mktemp /usr/sbin/policy-rc.d.segmint.XXXXXX)
            as_root cp -p "$policy" "$saved"
        fi
        printf '#!/bin/sh\n# segmint: no services started while mariadb-server installs\nexit 101\n' |
            as_root tee "$policy" >/dev/null
        as_root chmod 755 "$policy"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update || status=$?
        if [ "$status" -eq 0 ]; then
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
                mariadb-server || status=$?
        fi
        if [ -n "$saved" ]; then
            as_root mv "$saved" "$policy"
        else
            as_root rm -f "$policy"
        fi
        [ "$status" -eq 0 ] || die "installing mariadb-server failed"
        stop_system_mariadb
        # Under systemd the package also enabled the service for the next boot.
        if [ -d /run/systemd/system ]; then
            as_root systemctl disable --quiet mariadb || true
        fi
        have_mariadb || die "mariadb-server was installed but mariadbd, mariadb-install-db or mariadb is still missing"
    fi
    MARIADBD=$(mariadbd_path)
    export MARIADBD
}

# Stops the system MariaDB service if the package started one (its datadir is
# /var/lib/mysql; the tests' servers have their own).
stop_system_mariadb() {
    local pidfile=/run/mysqld/mysqld.pid pid
    [ -s "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    [ -d "/proc/$pid" ] || return 0
    say "stopping the MariaDB service the package started"
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        as_root systemctl stop mariadb || true
    else
        as_root kill -TERM "$pid" || true
    fi
    local _
    for _ in $(seq 60); do
        [ -d "/proc/$pid" ] || return 0
        sleep 0.5
    done
    die "the system MariaDB (pid $pid) did not stop"
}

have_prometheus() {
    command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1
}

# Installs Debian's prometheus (the server and promtool) unless both are already on
# PATH: the observability tests lint /metrics, check and unit-test the alert rules, and
# run a real Prometheus against a server.
ensure_prometheus() {
    if ! have_prometheus; then
        say "prometheus or promtool not found; installing Debian's prometheus"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
        have_prometheus || die "prometheus was installed but prometheus or promtool is still missing"
    fi
}

# Debian's libfaketime: the snowflake tests step a server's clock with it.
FAKETIME_LIB=/usr/lib/$(uname -m)-linux-gnu/faketime/libfaketime.so.1

ensure_faketime() {
    if [ ! -e "$FAKETIME_LIB" ]; then
        say "libfaketime not found; installing Debian's faketime"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends faketime
        [ -e "$FAKETIME_LIB" ] || die "faketime was installed but $FAKETIME_LIB is still missing"
    fi
}

# Debian's redis-tools (redis-cli, redis-benchmark) and redis-server: the tests of the
# Redis protocol drive segmint with them, and compare it with Redis.
ensure_redis() {
    if ! command -v redis-cli >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1 ||
        ! command -v redis-server >/dev/null 2>&1; then
        say "redis-cli, redis-benchmark or redis-server not found; installing Debian's redis-tools and redis-server"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-tools redis-server
        command -v redis-cli >/dev/null 2>&1 || die "redis-tools was installed but redis-cli is still missing"
    fi
}

# Node.js 18.19 or newer and npm: the tests of the Redis protocol install Node's Redis
# clients (ioredis, node-redis) with `npm ci` and run them against segmint.
ensure_node() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        say "node or npm not found; installing Debian's nodejs and npm"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm
        command -v npm >/dev/null 2>&1 || die "nodejs and npm were installed but npm is still missing"
    fi
}

# Prints N free loopback TCP ports, distinct (all bound at once while they are chosen).
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# pg TOOL ARGS...: runs PostgreSQL's TOOL from $PG_BIN (ensure_postgresql sets it) as the
# `postgres` user when we are root (PostgreSQL refuses root), from a directory that user
# can read, to spare a warning.
pg() {
    # The server's tools are in PG_BIN; a client such as psql may be only on the PATH
    # (Debian's postgresql-client beside a server elsewhere).
    local tool=$PG_BIN/$1
    [ -x "$tool" ] || tool=$(command -v "$1") || die "$1 not found (looked in $PG_BIN and PATH)"
    if is_root; then
        (cd / && runuser -u postgres -- env LC_ALL=C "$tool" "${@:2}")
    else
        (cd / && env LC_ALL=C "$tool" "${@:2}")
    fi
}

# Stops a process this script started: SIGTERM, then SIGKILL after 15 s.
stop_pid() {
    local pid=$1 i
    [[ $pid =~ ^[1-9][0-9]*$ ]] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null || true
}

# wait_for_ping PID LOG PORT [REDIS-CLI ARGS...]: waits until the Redis-protocol server
# PID answers PING on 127.0.0.1:PORT; fails when it exits (see LOG) or after 30 s.
wait_for_ping() {
    local pid=$1 log=$2 port=$3 i
    shift 3
    for ((i = 0; ; i++)); do
        [ "$(redis-cli -h 127.0.0.1 -p "$port" --no-auth-warning "$@" ping 2>/dev/null)" = PONG ] && return 0
        kill -0 "$pid" 2>/dev/null || die "the server on port $port exited; see $log"
        [ "$i" -lt 300 ] || die "the server on port $port did not answer PING within 30 s; see $log"
        sleep 0.1
    done
}

# start_redis_server PORT DIR LOG: starts redis-server on 127.0.0.1:PORT without
# persistence, its files in DIR, and waits for its PONG; sets REDIS_PID and
# REDIS_CMD (the command, for a report). Call it in the script's own shell (not in
# $(…)), so that the script can stop the server.
start_redis_server() {
    REDIS_CMD=(redis-server --bind 127.0.0.1 --port "$1" --save '' --appendonly no
        --dir "$2" --logfile "$3")
    mkdir -p "$2"
    "${REDIS_CMD[@]}" &
    REDIS_PID=$!
    wait_for_ping "$REDIS_PID" "$3" "$1"
}

# proc_cpu_ticks PID: the CPU time the process has used so far, user plus system
# (utime + stime of /proc/PID/stat), in clock ticks (getconf CLK_TCK a second).
proc_cpu_ticks() {
    local stat fields
    stat=$(<"/proc/$1/stat")
    # The command name, in parentheses, may hold spaces: the fields follow its last `)`.
    read -r -a fields <<<"${stat##*) }"
    echo $((fields[11] + fields[12]))
}
