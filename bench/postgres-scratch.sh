#!/usr/bin/env bash
# A throwaway PostgreSQL for bench/temporal-cluster.sh (user temporal, no password, 127.0.0.1 only), from
# PostgreSQL's own binaries in PG_BIN (a distribution's, or the portable build the PyPI wheel `pgserver`
# carries in pgserver/pginstall/bin; copied elsewhere, keep the wheel's pgserver.libs beside pgserver/:
# its binaries find libpq there). Run as root, it runs as nobody (PostgreSQL refuses root).
#
#   PG_BIN=… bench/postgres-scratch.sh start DIR [PORT]     # prints 127.0.0.1:PORT
#   PG_BIN=… bench/postgres-scratch.sh stop DIR
#
# For benches: its data lives in DIR and nothing is secured.
set -euo pipefail
usage() { echo "usage: PG_BIN=DIR $0 start DIR [PORT] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 dir=$2 port=${3:-5433}
bin=${PG_BIN:?PG_BIN: the folder with initdb, pg_ctl and postgres}
[ -x "$bin/pg_ctl" ] || { echo "postgres-scratch: PG_BIN $bin has no pg_ctl" >&2; exit 2; }
[[ $port =~ ^[1-9][0-9]*$ ]] || { echo "postgres-scratch: PORT must be a port number, not '$port'" >&2; exit 2; }
as_owner() {
  if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi
}
case $cmd in
  start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ "$(id -u)" = 0 ]; then
      chown 65534:65534 "$dir"
      as_owner test -w "$dir" || { echo "postgres-scratch: nobody cannot reach $dir (a folder above it is closed to others): choose a DIR under /tmp" >&2; exit 1; }
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      as_owner "$bin/initdb" -D "$dir/data" -U temporal --auth=trust -E UTF8 > "$dir/initdb.log" 2>&1 ||
        { tail -5 "$dir/initdb.log" >&2; exit 1; }
    fi
    # enough connections for a server's stores at their defaults; the rest as PostgreSQL ships
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=400 -c shared_buffers=1GB" start > /dev/null
    echo "127.0.0.1:$port"
    ;;
  stop) as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop > /dev/null ;;
  *) usage ;;
esac
