# Types stormlet/runtime/metrics.py when it is compiled (see runtime/build_mode.py): the
# executors and collectors count into C fields.

from stormlet.metrics.histogram cimport LatencyHistogram

cdef class TaskMetrics:
    cdef public long long acked
    cdef public double busy_secs
    cdef public LatencyHistogram complete_latency
    cdef public object component
    cdef dict _emit_counters
    cdef public object errors
    cdef public LatencyHistogram execute_latency
    cdef public long long executed
    cdef public dict fail_reasons
    cdef public long long failed
    cdef public object partitions
    cdef public LatencyHistogram process_latency
    cdef public tuple streams
    cdef public object task
    cdef public double throttled_secs
    cdef public long long transferred
    cdef public object user
