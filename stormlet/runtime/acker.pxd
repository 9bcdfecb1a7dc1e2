# Types stormlet/runtime/acker.py when it is compiled (see runtime/build_mode.py): an entry is
# read and written as two C integers through IntMap's u64 methods, with no int object per update.

cimport cython
from stormlet.runtime.int_map cimport IntMap
from stormlet.runtime.rotating_map cimport RotatingMap

cdef unsigned int TASK_MASK
cdef int COMPONENT_SHIFT

@cython.locals(bucket=IntMap, found=bint, xor=cython.ulonglong, low=cython.uint)
cdef (bint, unsigned long long, unsigned int) _take(list buckets, unsigned long long root)

cdef class Acker:
    cdef public RotatingMap pending
    cdef public RotatingMap failed_early
    cdef bint _any_failed_early

    @cython.locals(buckets=list, newest=IntMap, found=bint, xor=cython.ulonglong,
                   low=cython.uint, value=cython.ulonglong, task=cython.uint,
                   last=cython.uint)
    cpdef inits(self, list batch, unsigned int component, dict acked, dict failed)
    @cython.locals(buckets=list, newest=IntMap, pairs=cython.ulonglong[:], i=Py_ssize_t)
    cpdef acks(self, object batch, unsigned int component, dict acked)
    @cython.locals(found=bint, xor=cython.ulonglong, low=cython.uint, task=cython.uint)
    cdef _ack(self, list buckets, IntMap newest, unsigned long long root,
              unsigned long long value, unsigned int component, dict acked)
    @cython.locals(buckets=list, found=bint, _xor=cython.ulonglong, low=cython.uint)
    cpdef fails(self, list batch, unsigned int component, dict failed)
    @cython.locals(buckets=list, newest=IntMap, found=bint, xor=cython.ulonglong,
                   low=cython.uint)
    cpdef resets(self, list roots, dict reset)
    @cython.locals(buckets=list, found=bint, _xor=cython.ulonglong, low=cython.uint,
                   component=cython.uint)
    cpdef timeouts(self, list roots, spout_task, dict failed)
