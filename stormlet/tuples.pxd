# Types stormlet/tuples.py when it is compiled (see stormlet/build_mode.py): the collectors and
# executors read a tuple's slots as C struct fields.

cdef class StreamInfo:
    cdef public object component
    cdef public object stream
    cdef public list fields
    cdef public dict index

cdef class Tuple:
    cdef public object values
    cdef public StreamInfo info
    cdef public object source_task
    cdef public object roots
    cdef public object ack_val
