# Types stormlet/runtime/spout_executor.py when it is compiled (see runtime/build_mode.py): a
# spout task takes its acks with C calls into its pending map, entries and counters.

from stormlet.runtime.rotating_map cimport RotatingMap
from stormlet.runtime.task_collectors cimport InFlight, SpoutCollector
from stormlet.runtime.metrics cimport TaskMetrics

cdef long long LATENCY_SAMPLE
