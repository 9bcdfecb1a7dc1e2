# Types stormlet/spark/backfill/emitter.py when it is compiled (see runtime/build_mode.py): emit
# reads a stream's route as a C structure and calls the value check as a C function.

from stormlet.runtime.serialization cimport checked
from stormlet.tuples cimport StreamInfo

cdef class _StreamOut:
    cdef public dict appends
    cdef public object chooser
    cdef public Py_ssize_t count
    cdef public bint direct
    cdef public dict direct_targets
    cdef public set direct_tasks
    cdef public StreamInfo info
    cdef public bint only_written
    cdef public object output
    cdef public object send

cdef class Emitter:
    cdef dict __dict__
    cdef public object component_id
    cdef public object task
    cdef public object registry
    cdef public object flush
    cdef public dict streams
    cdef dict _plain
