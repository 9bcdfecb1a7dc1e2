# Types stormlet/runtime/routing.py when it is compiled (see runtime/build_mode.py).

from stormlet.runtime.choosers cimport PerTupleChooser
from stormlet.tuples cimport StreamInfo

cdef class StreamRoute:
    cdef public StreamInfo info
    cdef public list choosers
    cdef public object choose
    cdef public bint direct
    cdef public set direct_tasks
    cdef public long long emitted
    cdef list _fixed
    cdef PerTupleChooser _per_tuple
    cpdef object tasks_for(self, object values)
