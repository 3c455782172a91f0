#!/usr/bin/env bash
# Temporal's own server binary (temporal-server: frontend, history, matching and worker services in one
# process, as a self-hosted cluster runs them) with SHARDS history shards over a SQLite file or a
# PostgreSQL, for the benches that ask what the embedded dev server costs at 512 episodes in flight
# (docs/benchmarks.md "512 episodes in flight"). The namespace gets what tempo-rl needs of a cluster
# (docs/deployment.md): its search attributes and eager activities. Then point tempo-rl at it:
#
#   bench/temporal-cluster.sh start DIR [SHARDS] [PORT]     # prints the address (127.0.0.1:PORT)
#   node --import tsx bench/overhead.ts --part b … --set temporal.address=127.0.0.1:PORT --server-pid "$(cat DIR/server.pid)"
#   bench/temporal-cluster.sh stop DIR
#
# TEMPORAL_SERVER_BIN: the temporal-server binary (`go install go.temporal.io/server/cmd/server@v1.32.0`,
# the release the CLI's dev server embeds); TEMPO_RL_TEMPORAL_BIN: the temporal CLI (scripts/bootstrap.sh
# sets it), which registers the namespace. TEMPORAL_CLUSTER_SQLITE_CONNS: SQLite connections (default 1;
# more fail with "database is locked" under load). TEMPORAL_CLUSTER_POSTGRES=HOST:PORT: a PostgreSQL (user
# temporal, no password; bench/postgres-scratch.sh starts one) instead of SQLite, its schema set up with
# TEMPORAL_SQL_TOOL_BIN (`go install go.temporal.io/server/cmd/tools/sql@v1.32.0`) from TEMPORAL_SCHEMA_DIR
# (the server module's schema/postgresql/v12). TEMPORAL_CLUSTER_DYNAMIC="KEY=VALUE ...": more of the
# server's dynamic config (e.g. matching.numTaskqueueReadPartitions=8). For benches: nothing here is secured.
set -euo pipefail
usage() { echo "usage: $0 start DIR [SHARDS] [PORT] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 dir=$2
case $cmd in
  stop)
    [ -f "$dir/server.pid" ] || { echo "temporal-cluster: no server.pid in $dir" >&2; exit 1; }
    pid=$(cat "$dir/server.pid")
    # only the server this folder started (a pid left by a crash may be another process's by now)
    if ! { [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF "$(cd "$dir" && pwd)/config.yaml"; }; then
      rm -f "$dir/server.pid"
      exit 0
    fi
    kill "$pid" 2> /dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2> /dev/null || true
    rm -f "$dir/server.pid"
    exit 0
    ;;
  start) ;;
  *) usage ;;
esac
shards=${3:-16} port=${4:-7433}
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "temporal-cluster: SHARDS must be a positive integer, not '$shards'" >&2; exit 2; }
[[ $port =~ ^[1-9][0-9]*$ ]] && [ "$port" -le 65000 ] || { echo "temporal-cluster: PORT must be a port number, not '$port'" >&2; exit 2; }
server=${TEMPORAL_SERVER_BIN:?TEMPORAL_SERVER_BIN: the temporal-server binary}
cli=${TEMPO_RL_TEMPORAL_BIN:?TEMPO_RL_TEMPORAL_BIN: the temporal CLI (source scripts/bootstrap.sh)}
[ -x "$server" ] || { echo "temporal-cluster: TEMPORAL_SERVER_BIN $server is not an executable" >&2; exit 2; }
if [ -e "$dir/server.pid" ] && kill -0 "$(cat "$dir/server.pid")" 2> /dev/null; then
  echo "temporal-cluster: a server already runs from $dir (pid $(cat "$dir/server.pid"))" >&2
  exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
namespace=${TEMPORAL_NAMESPACE:-default}

store() {  # NAME DATABASE: one datastore, SQLite (one file for executions and visibility, as the dev
  # server keeps them) or PostgreSQL (executions only: visibility's schema needs the btree_gin extension,
  # which a portable PostgreSQL may lack; visibility is written off a workflow task's path)
  printf '    %s:\n      sql:\n' "$1"
  if [ -n "${TEMPORAL_CLUSTER_POSTGRES:-}" ] && [ "$1" = default ]; then
    printf '        pluginName: postgres12\n        databaseName: %s\n        connectAddr: %s\n' "$2" "$TEMPORAL_CLUSTER_POSTGRES"
    printf '        connectProtocol: tcp\n        user: temporal\n        password: ""\n'
    printf '        maxConns: 64\n        maxIdleConns: 64\n        maxConnLifetime: 1h\n'
  else
    printf '        pluginName: sqlite\n        databaseName: %s/temporal.db\n        connectAddr: localhost\n' "$dir"
    printf '        connectProtocol: tcp\n        connectAttributes: { mode: rwc, setup: "true", journal_mode: wal, synchronous: "1" }\n'
    printf '        maxConns: %s\n        maxIdleConns: %s\n        maxConnLifetime: 1h\n' "${TEMPORAL_CLUSTER_SQLITE_CONNS:-1}" "${TEMPORAL_CLUSTER_SQLITE_CONNS:-1}"
  fi
}
postgres_schema() {  # the executions' database and schema, at the server's version
  local tool=${TEMPORAL_SQL_TOOL_BIN:?TEMPORAL_SQL_TOOL_BIN: the temporal-sql-tool binary} schema=${TEMPORAL_SCHEMA_DIR:?TEMPORAL_SCHEMA_DIR: schema/postgresql/v12 of the server}
  local sql=("$tool" --plugin postgres12 --ep "${TEMPORAL_CLUSTER_POSTGRES%:*}" -p "${TEMPORAL_CLUSTER_POSTGRES##*:}" -u temporal)
  "${sql[@]}" --db temporal create-database > /dev/null 2>&1 || true
  "${sql[@]}" --db temporal setup-schema -v 0.0 > "$dir/schema.log" 2>&1 &&
    "${sql[@]}" --db temporal update-schema -d "$schema/temporal/versioned" >> "$dir/schema.log" 2>&1 ||
    { echo "temporal-cluster: the schema was not set up; see $dir/schema.log" >&2; exit 1; }
}
service() {  # NAME GRPC_PORT MEMBERSHIP_PORT [HTTP_PORT]
  printf '  %s:\n    rpc:\n      grpcPort: %s\n      membershipPort: %s\n      bindOnLocalHost: true\n' "$1" "$2" "$3"
  [ -z "${4:-}" ] || printf '      httpPort: %s\n' "$4"
}
{
  printf 'log:\n  stdout: true\n  level: warn\n'
  printf 'persistence:\n  defaultStore: default\n  visibilityStore: visibility\n  numHistoryShards: %s\n' "$shards"
  printf '  datastores:\n'
  store default temporal
  store visibility temporal_visibility
  printf 'global:\n  membership:\n    maxJoinDuration: 30s\n    broadcastAddress: 127.0.0.1\n'
  printf '  metrics:\n    prometheus:\n      framework: tally\n      timerType: histogram\n      listenAddress: 127.0.0.1:%s\n' $((port + 9))
  printf 'services:\n'
  service frontend "$port" $((port + 10)) $((port + 8))
  service history $((port + 1)) $((port + 11))
  service matching $((port + 2)) $((port + 12))
  service worker $((port + 3)) $((port + 13))
  printf 'clusterMetadata:\n  enableGlobalNamespace: false\n  failoverVersionIncrement: 10\n'
  printf '  masterClusterName: active\n  currentClusterName: active\n  clusterInformation:\n    active:\n'
  printf '      enabled: true\n      initialFailoverVersion: 1\n      rpcName: frontend\n      rpcAddress: 127.0.0.1:%s\n' "$port"
  printf '      httpAddress: 127.0.0.1:%s\n' $((port + 8))
  printf 'dcRedirectionPolicy:\n  policy: noop\n'
  printf 'dynamicConfigClient:\n  filepath: %s/dynamic.yaml\n  pollInterval: 10s\n' "$dir"
} > "$dir/config.yaml"
# what tempo-rl needs of a server and its namespace, from their one declaration (supervise/server.ts:
# the dynamic config the embedded server is started with, the search attributes)
needs=$(cd "$(dirname "$0")/.." && node --import tsx --input-type=module -e "
const { SEARCH_ATTRIBUTES, DYNAMIC_CONFIG } = await import('./supervise/server.ts');
for (const [k, v] of Object.entries(DYNAMIC_CONFIG)) console.log('dynamic', k, JSON.stringify(v));
for (const [k, v] of Object.entries(SEARCH_ATTRIBUTES)) console.log('attribute', k, v);") ||
  { echo "temporal-cluster: could not read supervise/server.ts (node with the project's packages: source scripts/bootstrap.sh)" >&2; exit 1; }
{
  awk '$1 == "dynamic" { printf "%s:\n  - value: %s\n", $2, $3 }' <<< "$needs"
  # search attributes visible as soon as they are created
  printf 'system.forceSearchAttributesCacheRefreshOnRead:\n  - value: true\n'
  for kv in ${TEMPORAL_CLUSTER_DYNAMIC:-}; do
    [[ $kv == *=* ]] || { echo "temporal-cluster: TEMPORAL_CLUSTER_DYNAMIC wants KEY=VALUE, not '$kv'" >&2; exit 2; }
    printf '%s:\n  - value: %s\n' "${kv%%=*}" "${kv#*=}"
  done
} > "$dir/dynamic.yaml"
attributes=$(awk '$1 == "attribute" { print $2 "=" $3 }' <<< "$needs")
# a visibility query naming every attribute (answered once the services' caches hold them all)
query=$(awk '$1 == "attribute" { printf "%s%s %s", (n++ ? " AND " : ""), $2, ($3 == "Keyword" ? "= \"x\"" : ">= 0") }' <<< "$needs")

[ -z "${TEMPORAL_CLUSTER_POSTGRES:-}" ] || postgres_schema
setsid "$server" --config-file "$dir/config.yaml" --allow-no-auth start > "$dir/server.log" 2>&1 < /dev/null &
echo $! > "$dir/server.pid"
# a start that fails from here on stops the server it started
trap '[ $? = 0 ] || bash "$0" stop "$dir" || true' EXIT
addr=127.0.0.1:$port
for _ in $(seq 150); do
  kill -0 "$(cat "$dir/server.pid")" 2> /dev/null || { tail -20 "$dir/server.log" >&2; echo "temporal-cluster: the server exited; see $dir/server.log" >&2; exit 1; }
  "$cli" operator cluster health --address "$addr" > /dev/null 2>&1 && break
  sleep 0.2
done
"$cli" operator namespace describe --address "$addr" -n "$namespace" > /dev/null 2>&1 ||
  "$cli" operator namespace create --address "$addr" -n "$namespace" --retention 72h > /dev/null
# a namespace just created reaches the services through their caches: add the search attributes until
# a visibility query that names them answers
for _ in $(seq 150); do
  for sa in $attributes; do
    "$cli" operator search-attribute list --address "$addr" -n "$namespace" 2> /dev/null | grep -q "^ *${sa%%=*} " ||
      "$cli" operator search-attribute create --address "$addr" -n "$namespace" --name "${sa%%=*}" --type "${sa#*=}" > /dev/null 2>&1 || true
  done
  "$cli" workflow list --address "$addr" -n "$namespace" --query "$query" --limit 1 > /dev/null 2>&1 && { echo "$addr"; exit 0; }
  sleep 0.3
done
echo "temporal-cluster: namespace $namespace on $addr did not become usable; see $dir/server.log" >&2
exit 1
