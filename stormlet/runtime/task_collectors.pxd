# Types stormlet/runtime/task_collectors.py when it is compiled (see runtime/build_mode.py). Every
# attribute its __init__ methods set is declared here; __dict__ is for debug mode's logged emit
# and task hooks' emit (see _Emitter._choose_emit).

cimport cython
from cpython.array cimport array, resize_smart

from stormlet.tuples cimport StreamInfo, Tuple, tracked, untracked
from stormlet.runtime.routing cimport StreamRoute
from stormlet.runtime.metrics cimport TaskMetrics
from stormlet.runtime.serialization cimport checked
from stormlet.runtime.rotating_map cimport RotatingMap
from stormlet.collectors cimport BasicOutputCollector
from stormlet.runtime.sampling cimport Sampler

cdef unsigned long long MASK64, GOLDEN, MIX1, MIX2

cdef class EdgeIds:
    cdef object _given
    cdef unsigned long long _state
    @cython.locals(z=cython.ulonglong)
    cpdef unsigned long long next(self) except? 0

@cython.locals(base=cython.ulonglong)
cdef unsigned long long root_for_acker(unsigned long long root, unsigned long long n,
                                       unsigned long long index)

cdef class _Emitter:
    cdef dict __dict__
    cdef public object component_id
    cdef public object task
    cdef dict _routes
    cdef object _transfer
    cdef list _data
    cdef bint _tracking
    cdef unsigned long long _n_ackers
    cdef EdgeIds _ids
    cdef public TaskMetrics metrics
    cdef dict _plain_routes
    cdef public bint logs_emits
    cdef object _last_stream
    cdef StreamRoute _last_route
    cdef public object sampler
    cdef long long _countdown
    cdef public object hooks
    @cython.locals(sampler=Sampler, tup=Tuple)
    cdef _sample(self, object values, object stream, object tasks, object msg_id)

cdef inline StreamRoute _route_of(_Emitter emitter, object stream, object to_task)
cdef inline object _tasks_of(_Emitter emitter, StreamRoute route, object values, object to_task)

cdef class InFlight:
    cdef public object msg_id
    cdef public double emitted_at
    cdef public object values

# Final: their C methods are called with no check for an override (the instance has a
# __dict__, so without it every call of a cpdef method looks for one).
@cython.final
cdef class SpoutCollector(_Emitter):
    cdef RotatingMap _pending
    cdef object _dead_letters
    cdef list _inits
    cdef list _local_ackers
    cdef unsigned long long _n_local_ackers
    cdef public list acked_at_emit
    cdef public bint closed
    cdef public Py_ssize_t refused
    cdef public Py_ssize_t emits
    cdef list _emit(self, object values, object msg_id, object stream, object _to_task)

@cython.final
cdef class BoltCollector(_Emitter):
    cdef list _acks
    cdef unsigned long long _run_root
    cdef unsigned long long _run_value
    cdef list _fails
    cdef list _resets
    cdef object _sampled
    cdef double _sampled_at
    cdef dict _started
    cdef double _timeout_secs
    cdef object _process_latency
    cdef list _emit(self, object values, object anchors, object stream, object _to_task)
    cpdef ack(self, Tuple tup)
    cpdef settle_acks(self)
    @cython.locals(pairs=array, n=Py_ssize_t)
    cdef _add_ack(self, unsigned long long root, unsigned long long value)

cdef class BasicCollector(BasicOutputCollector):
    pass
