# Types stormlet/runtime/choosers.py when it is compiled (see runtime/build_mode.py): a fields
# grouping hashes an ASCII str's characters where they are, a shuffle grouping draws its random
# numbers and a partial-key grouping hashes its keys, with C arithmetic.

cimport cython

from stormlet.runtime.serialization cimport is_ascii

cdef extern from "Python.h":
    void *PyUnicode_DATA(object text)

cdef unsigned int CRC_TABLE[256]

@cython.locals(data=cython.p_uchar, i=Py_ssize_t, crc=cython.uint)
cpdef unsigned int ascii_crc32(str text)

cdef unsigned long long _hash_one(object v, object pack) except? 0

cdef class PerTupleChooser:
    cpdef list choose(self, list values)

cdef class OneFieldChooser(PerTupleChooser):
    cdef Py_ssize_t index
    cdef list singles
    cdef unsigned long long n
    cdef object pack
    cpdef list choose(self, list values)

cdef unsigned long long MASK64
cdef unsigned long long XORSHIFT_MULTIPLIER

cdef class ShuffleChooser(PerTupleChooser):
    cdef list order
    cdef Py_ssize_t n
    cdef Py_ssize_t position
    cdef unsigned long long state
    cpdef list choose(self, list values)
    @cython.locals(i=Py_ssize_t, j=Py_ssize_t)
    cdef void _reshuffle(self)
    @cython.locals(x=cython.ulonglong)
    cdef unsigned long long _next_random(self)

cdef class LoadAwareChooser(PerTupleChooser):
    cdef public list singles
    cdef public list ring
    cdef Py_ssize_t position
    @cython.locals(ring=list, position=Py_ssize_t)
    cpdef list choose(self, list values)
    cpdef use(self, list ring)

cdef class FieldsChooser(PerTupleChooser):
    cdef list indexes
    cdef list singles
    cdef unsigned long long n
    cdef object pack
    cpdef list choose(self, list values)

cdef unsigned long long FNV_PRIME
cdef unsigned long long FIRST_OFFSET
cdef unsigned long long SECOND_OFFSET
cdef unsigned long long MIX_FIRST
cdef unsigned long long MIX_SECOND

@cython.locals(h=cython.ulonglong, byte=cython.uchar)
cpdef unsigned long long key_hash(bytes key, unsigned long long offset)

@cython.locals(data=cython.p_uchar, i=Py_ssize_t, h=cython.ulonglong)
cpdef unsigned long long ascii_key_hash(str text, unsigned long long offset)

cdef inline unsigned long long _mixed(unsigned long long h)

cdef class PartialKeyChooser(PerTupleChooser):
    cdef list indexes
    cdef Py_ssize_t one_field
    cdef list singles
    cdef unsigned long long n
    cdef unsigned long long[::1] sent
    cdef object pack
    @cython.locals(key=bytes)
    cpdef list choose(self, list values)
    cdef list _pick(self, unsigned long long first, unsigned long long second)
