#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests: initdb in a temp dir, a server on loopback only
# (127.0.0.1 on a free port, plus a Unix socket in that dir), one database `aria`.
#
#   bash .ci/postgres.sh CMD [ARGS...]   runs CMD with ARIA_PG_URL exported, then stops the
#                                        cluster and removes its dir (also on failure or Ctrl-C);
#                                        exits with CMD's status
#   bash .ci/postgres.sh                 starts a cluster, prints `export ...` lines for it and
#                                        leaves it running
#   bash .ci/postgres.sh --stop DIR      stops the cluster in DIR and removes DIR
#
# Exported: ARIA_PG_URL (postgres://aria:PASSWORD@127.0.0.1:PORT/aria, password auth over TCP),
# ARIA_PG_SOCKET_URL (the same database over the Unix socket), ARIA_PG_DIR (the cluster's dir).
# Installs Debian's postgresql-15 when no server binaries are found. PostgreSQL refuses to run as
# root: under root the server runs as the `postgres` user. The cluster trades durability for
# speed (fsync off): it is for tests only.
set -euo pipefail

as_server() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

stop_cluster() {
    local dir=$1
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_server "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
}

find_bin() {
    local b
    for b in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
        if [ -x "$b/initdb" ] && [ -x "$b/pg_ctl" ]; then
            echo "$b"
            return 0
        fi
    done
    return 1
}

PGBIN=$(find_bin || true)
if [ -z "$PGBIN" ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q postgresql-15 >&2
    # The package starts its own cluster where it can; this script does not use it.
    PGBIN=$(find_bin)
fi

if [ "${1:-}" = "--stop" ]; then
    [ -n "${2:-}" ] && [ -f "$2/aria-pg" ] || {
        echo "postgres.sh: --stop needs a cluster dir made by this script" >&2
        exit 2
    }
    stop_cluster "$2"
    exit 0
fi

if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "postgres.sh: running as root but there is no \`postgres\` user to run the server" >&2
    exit 1
fi

DIR=$(mktemp -d "${TMPDIR:-/tmp}/aria-pg.XXXXXX")
touch "$DIR/aria-pg"
chmod 755 "$DIR"
mkdir "$DIR/sock"
[ "$(id -u)" = 0 ] && chown -R postgres: "$DIR"
if [ $# -gt 0 ]; then
    trap 'stop_cluster "$DIR"' EXIT
    trap 'exit 130' INT TERM
fi

PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
printf '%s\n' "$PASSWORD" >"$DIR/pw"
[ "$(id -u)" = 0 ] && chown postgres: "$DIR/pw"
chmod 600 "$DIR/pw"
as_server "$PGBIN/initdb" -D "$DIR/data" -U aria --pwfile="$DIR/pw" -E UTF8 --locale=C \
    --auth-local=trust --auth-host=scram-sha-256 --no-sync >"$DIR/initdb.log" 2>&1 || {
    cat "$DIR/initdb.log" >&2
    exit 1
}
rm -f "$DIR/pw"

# A free port: try random ones until the server starts (another cluster may hold one).
PORT=""
for _ in $(seq 1 20); do
    p=$((20000 + RANDOM % 40000))
    if as_server "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 30 start \
        -o "-c listen_addresses=127.0.0.1 -p $p -k $DIR/sock -c fsync=off \
            -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
        >/dev/null 2>&1; then
        PORT=$p
        break
    fi
done
if [ -z "$PORT" ]; then
    echo "postgres.sh: the server did not start; its log:" >&2
    cat "$DIR/server.log" >&2 || true
    exit 1
fi
as_server "$PGBIN/createdb" -h "$DIR/sock" -p "$PORT" -U aria aria

export ARIA_PG_DIR="$DIR"
export ARIA_PG_URL="postgres://aria:$PASSWORD@127.0.0.1:$PORT/aria"
export ARIA_PG_SOCKET_URL="postgres://aria@${DIR//\//%2F}%2Fsock:$PORT/aria"

if [ $# -eq 0 ]; then
    echo "export ARIA_PG_DIR='$ARIA_PG_DIR'"
    echo "export ARIA_PG_URL='$ARIA_PG_URL'"
    echo "export ARIA_PG_SOCKET_URL='$ARIA_PG_SOCKET_URL'"
    echo "# stop with: bash .ci/postgres.sh --stop '$DIR'" >&2
    exit 0
fi

echo "postgres.sh: PostgreSQL $("$PGBIN/postgres" -V | awk '{print $3}') on 127.0.0.1:$PORT ($DIR)" >&2
set +e
"$@"
status=$?
set -e
exit $status
