# Types stormlet/runtime/int_map.py when it is compiled (see runtime/build_mode.py): the arrays are
# typed memoryviews and the probing helpers C methods.

cimport cython

cdef unsigned long long GOLDEN
cdef unsigned long long MASK64
cdef object KEY_LIMIT
cdef unsigned long long EMPTY
cdef int MIN_BITS
cdef Py_ssize_t MAX_LOAD_TENTHS
cdef object VALUE_LIMIT

@cython.final
cdef class IntMap:
    cdef dict _others
    cdef int _bits
    cdef int _shift
    cdef Py_ssize_t _mask
    cdef Py_ssize_t _count
    cdef unsigned long long[:] _keys
    cdef unsigned long long[:] _high
    cdef unsigned int[:] _low

    cdef _reset(self, int bits)
    @cython.locals(slot=Py_ssize_t, found=cython.ulonglong)
    cdef Py_ssize_t _probe(self, unsigned long long key)
    @cython.locals(k=cython.ulonglong, slot=Py_ssize_t)
    cdef Py_ssize_t _slot_of(self, object key) except -2
    @cython.locals(high=object)
    cdef object _value_at(self, Py_ssize_t slot)
    @cython.locals(j=Py_ssize_t, home=Py_ssize_t, mask=Py_ssize_t, key=cython.ulonglong)
    cdef _remove_at(self, Py_ssize_t i)
    @cython.locals(slot=Py_ssize_t)
    cdef _put(self, unsigned long long key, unsigned long long high, unsigned int low)
    @cython.locals(slot=Py_ssize_t, keys=cython.ulonglong[:], high=cython.ulonglong[:],
                   low=cython.uint[:])
    cdef _grow(self)
    cdef _discard(self, object key)
    cpdef (bint, unsigned long long, unsigned int) take_parts(self, object key)
    @cython.locals(slot=Py_ssize_t, found=cython.ulonglong, high=cython.ulonglong,
                   low=cython.uint)
    cpdef (bint, unsigned long long, unsigned int) take_u64(self, unsigned long long key)
    cdef (bint, unsigned long long, unsigned int) _take_other(self, object key)
    cpdef put_parts(self, object key, unsigned long long high, unsigned int low)
    cpdef put_u64(self, unsigned long long key, unsigned long long high, unsigned int low)
    @cython.locals(packed=object)
    cdef _put_other(self, object key, unsigned long long high, unsigned int low)

cdef bint _is_array_key(object key)
cdef bint _packable(object key, object value)
cdef bint _packable_value(object value)
