# Types stormlet/metrics/histogram.py when it is compiled (see runtime/build_mode.py): a spout
# task records complete latencies, and a bolt task execute latencies, with C arithmetic.

cimport cython
from libc.math cimport log10 as c_log10

cdef int BUCKETS_PER_DECADE
cdef int BUCKETS

@cython.locals(micros=cython.double, bucket=cython.int)
cpdef int bucket_of(double seconds)

cdef class LatencyHistogram:
    cdef public list counts
    cdef public long long total
    cdef public double sum
    cpdef record(self, double seconds)
    cpdef record_many(self, double seconds, long long n)
