#!/usr/bin/env bash
# A one-machine stormlet cluster for trying things out: ZooKeeper, nimbus and two supervisors with
# two slots each, all under one directory, on loopback.
#   deploy/cluster.sh up [DIR]     start (default DIR: ./stormlet-cluster)
#   deploy/cluster.sh down [DIR]   stop everything, workers included
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
action=${1:-}
dir=$(realpath -m "${2:-stormlet-cluster}")
zk_port=${STORMLET_ZK_PORT:-2181}
export STORMLET_ZK=127.0.0.1:$zk_port

start_daemon() {  # name, then the stormlet arguments
  local name=$1; shift
  nohup stormlet "$@" >"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
  echo "started $name (pid $!, log $dir/$name.log)"
}

case "$action" in
  up)
    command -v stormlet >/dev/null || { echo "stormlet is not installed: pip install ." >&2; exit 1; }
    mkdir -p "$dir"
    # Every daemon and command authenticates with this secret (the daemons read the variable).
    [[ -f "$dir/cluster.secret" ]] || stormlet secret generate "$dir/cluster.secret"
    export STORMLET_SECRET_FILE="$dir/cluster.secret"
    bash "$here/zookeeper.sh" install
    bash "$here/zookeeper.sh" start --port "$zk_port" --data-dir "$dir/zookeeper"
    start_daemon nimbus nimbus --data-dir "$dir/nimbus"
    start_daemon supervisor1 supervisor --id supervisor1 --slots 6700,6701 --data-dir "$dir/supervisor1"
    # Two supervisors on one machine: a port each for their node services (nimbus reads logs there).
    start_daemon supervisor2 supervisor --id supervisor2 --slots 6702,6703 --service-port 6629 \
      --data-dir "$dir/supervisor2"
    echo "cluster up: export STORMLET_ZK=$STORMLET_ZK STORMLET_SECRET_FILE=$STORMLET_SECRET_FILE"
    echo "then: stormlet submit topologies/word_count.py -c topology.workers=4"
    ;;
  down)
    for name in supervisor1 supervisor2 nimbus; do
      if [[ -f "$dir/$name.pid" ]]; then
        kill "$(cat "$dir/$name.pid")" 2>/dev/null || true
        rm -f "$dir/$name.pid"
      fi
    done
    sleep 1
    # Workers are `python -m stormlet worker --zk ...`; those started before that command existed
    # (`-m stormlet.cluster.worker`, LEGACY_WORKER_MODULE in supervisor.py) may still run after
    # an upgrade.
    pkill -f "stormlet( worker|\.cluster\.worker) --zk $STORMLET_ZK " 2>/dev/null || true
    bash "$here/zookeeper.sh" stop --data-dir "$dir/zookeeper"
    ;;
  *)
    echo "usage: $0 up|down [DIR]" >&2
    exit 2
    ;;
esac
