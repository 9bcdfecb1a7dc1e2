#!/usr/bin/env bash
# Every benchmark, one after the other; each prints its own figures. With
# STORMLET_BENCH_RECORD=1 the benchmarks wired to figures.py also append them to results/, and
# LATEST.md's table is rendered from them at the end (benchmarks/diary.py), also when a
# benchmark fails part way: what was recorded before it still reaches the page.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${STORMLET_BENCH_RECORD:-0}" != 0 ]; then
    trap 'python benchmarks/diary.py' EXIT
fi
# The machine's steadiness first: whether this sitting's figures can be compared at all.
python benchmarks/cpu_speed.py
echo
python benchmarks/wordcount.py "$@"
echo
python benchmarks/peers/wordcount.py
# Needs valgrind; where it is missing it says so, and the rest still runs.
python benchmarks/peers/instructions.py || true
echo
python benchmarks/cluster_wordcount.py
python benchmarks/cluster_wordcount.py --secure
python benchmarks/cluster_wordcount.py --no-crossing
python benchmarks/scaling.py
python benchmarks/scaling.py --work 24
python benchmarks/blob_store.py
python benchmarks/crossing.py
python benchmarks/control_records.py
python benchmarks/groupings.py
echo
python benchmarks/state_and_windows.py
python benchmarks/stateful_windows.py
python benchmarks/effectively_once.py
python benchmarks/joins.py
echo
python benchmarks/streamparse_wordcount.py
echo
python benchmarks/backpressure.py
echo
python benchmarks/environments.py
echo
python benchmarks/metrics_cost.py
python benchmarks/sampling.py
python benchmarks/sampling.py --instructions || true
echo
python benchmarks/offset_spout.py
echo
python benchmarks/backfill.py
echo
python benchmarks/backfill_floor.py
echo
python benchmarks/replay.py
