# Types stormlet/runtime/sampling.py when it is compiled (see runtime/build_mode.py): a sample
# is made by a C call from the collector, reading the sampler's and the sink's fields in C.

cimport cython

@cython.final
cdef class SampleSink:
    cdef public object path
    cdef public Py_ssize_t keep
    cdef public object max_file_bytes
    cdef public object written_per_sec
    cdef public double room
    cdef double _granted_at
    cdef public Py_ssize_t thinned
    cdef public Py_ssize_t dropped
    cdef dict _latest
    cdef public object pending
    cdef Py_ssize_t _dropped_said
    cdef double _dropped_said_at
    cdef bint _write_failed

@cython.final
cdef class Sampler:
    cdef public double percent
    cdef public object component
    cdef public object task
    cdef public SampleSink sink
    cdef object _keep
    cdef object _random
    cdef double _log_keep
    cpdef Py_ssize_t gap(self) except -1
    @cython.locals(log_keep=cython.double, sink=SampleSink)
    cpdef Py_ssize_t take(self, object values, object stream, list tasks, object msg_id,
                          object roots) except -1
