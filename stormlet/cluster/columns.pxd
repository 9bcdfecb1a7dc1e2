# Types stormlet/cluster/columns.py when it is compiled (see runtime/build_mode.py).

cimport cython

from stormlet.tuples cimport StreamInfo, Tuple, tracked

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, nfields=Py_ssize_t, t=Tuple,
               first=Tuple, info=StreamInfo, columns=list, column=list,
               view=cython.ulonglong[:], by_field=bint, one_root_each=bint)
cpdef tuple to_columns(list tuples)

cpdef object joined(object column)

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, nfields=Py_ssize_t, out=list,
               first=list, values=list, column=list)
cpdef list rows(list columns, Py_ssize_t n)

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, view=cython.ulonglong[:])
cpdef list from_columns(list values_list, StreamInfo info, object src, object pairs)

