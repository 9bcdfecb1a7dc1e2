"""The test kit: Storm's ``Testing`` for stormlet (docs/testing.md has worked examples).

- ``complete_topology``: run a topology on mock spout data (``MockedSources``) to completion
  and read what each component emitted, by stream (complete.py).
- ``simulated_time``, ``SimulatedCluster``, ``advance_cluster_time``: ticks and processing-time
  windows on a clock the test moves (clock.py, cluster.py).
- ``make_tuple``, ``tick_tuple``, ``MockOutputCollector``, ``MockSpoutOutputCollector``,
  ``mock_context``, ``BoltHarness``, ``spout_harness``: one component at a time (mocks.py).
"""

from .clock import SimulatedClock, current_clock, simulated_time
from .cluster import SimulatedCluster, advance_cluster_time
from .complete import (
                       CompletedTopology,
                       CompleteTopologyParam,
                       MockedSources,
                       complete_topology,
                       multiset_eq,
)
from .mocks import (
                       BoltHarness,
                       Emitted,
                       MockOutputCollector,
                       MockSpoutOutputCollector,
                       make_tuple,
                       mock_context,
                       spout_harness,
                       tick_tuple,
)

__all__ = [
    "BoltHarness", "CompleteTopologyParam", "CompletedTopology", "Emitted", "MockOutputCollector",
    "MockSpoutOutputCollector", "MockedSources", "SimulatedClock", "SimulatedCluster",
    "advance_cluster_time", "complete_topology", "current_clock", "make_tuple", "mock_context",
    "multiset_eq", "simulated_time", "spout_harness", "tick_tuple",
]
