# Types stormlet/tuples.py when it is compiled (see stormlet/build_mode.py): the collectors and
# executors read a tuple's slots as C struct fields, and its ids are C integers.

cimport cython

cdef class StreamInfo:
    cdef public object component
    cdef public object stream
    cdef public list fields
    cdef public dict index

cdef class Tuple:
    cdef public object values
    cdef public StreamInfo info
    cdef public object source_task
    cdef public unsigned long long root
    cdef public unsigned long long edge
    cdef public object many
    cdef public unsigned long long ack_val

@cython.locals(tup=Tuple)
cpdef Tuple tracked(object values, StreamInfo info, object source_task, unsigned long long root,
                    unsigned long long edge)
cpdef Tuple untracked(object values, StreamInfo info, object source_task)
