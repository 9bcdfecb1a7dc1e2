# Types stormlet/runtime/rotating_map.py when it is compiled (see runtime/build_mode.py): the spout
# executors and the acker call put_new, buckets and take as C methods, and take pops a dict
# bucket as a dict.

cimport cython

cdef object _MISSING

cdef class RotatingMap:
    cdef object _new_bucket
    cdef list _buckets
    cpdef put_new(self, object key, object value)
    cpdef list buckets(self)
    @cython.locals(value=object)
    cpdef take(self, object key)
