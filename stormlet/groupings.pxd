# Types stormlet/groupings.py when it is compiled (see stormlet/build_mode.py): a fields
# grouping hashes an ASCII str's characters where they are, with C arithmetic.

cimport cython

from stormlet.serialization cimport is_ascii

cdef extern from "Python.h":
    void *PyUnicode_DATA(object text)

cdef unsigned int CRC_TABLE[256]

@cython.locals(data=cython.p_uchar, i=Py_ssize_t, crc=cython.uint)
cpdef unsigned int ascii_crc32(str text)

cdef unsigned long long _hash_one(object v) except? 0

@cython.final
cdef class OneFieldChooser:
    cdef Py_ssize_t index
    cdef list singles
    cdef unsigned long long n
    cpdef list choose(self, list values)
