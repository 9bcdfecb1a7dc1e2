# Types stormlet/runtime/spout_executor.py when it is compiled (see stormlet/build_mode.py): a
# spout task takes its acks with C calls into its pending map, entries and counters.

from stormlet.rotating_map cimport RotatingMap
from stormlet.runtime.collector cimport InFlight, SpoutCollector
from stormlet.runtime.metrics cimport TaskMetrics

cdef long long LATENCY_SAMPLE
