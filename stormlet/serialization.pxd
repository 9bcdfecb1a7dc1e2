# Types stormlet/serialization.py when it is compiled (see stormlet/build_mode.py): the
# collectors call the value check as a C function.

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object text)
    void PyObject_GC_UnTrack(object op)

cpdef bint is_ascii(str text)
cpdef list checked(object values, object stream, object component)
