# Types stormlet/serialization.py when it is compiled (see stormlet/build_mode.py): the
# collectors call the value check as a C function.

cimport cython

from stormlet.tuples cimport StreamInfo

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object text)
    void PyObject_GC_UnTrack(object op)

cpdef bint is_ascii(str text)
@cython.locals(plain=list)
cpdef list checked(object values, StreamInfo info, object component)
