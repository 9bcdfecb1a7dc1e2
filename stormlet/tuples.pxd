# Types stormlet/tuples.py when it is compiled (see runtime/build_mode.py): the collectors and
# executors read a tuple's slots as C struct fields, and its ids are C integers.

cimport cython

cdef extern from *:
    """
    #include <structmember.h>

    /* A Tuple's ``values`` as a read-only slot (see stormlet/tuples.py's values_read_only). */
    static CYTHON_UNUSED PyMemberDef stormlet_values_member = {"values", T_OBJECT_EX, 0, READONLY,
        "The tuple's values, one per field (read-only, as in Storm)."};

    /* Replaces ``type``'s ``values`` attribute with a member descriptor at the offset where
       ``probe`` (an instance of ``type``) holds ``values``. Returns 1 if done, 0 if no field of
       ``probe`` holds ``values`` (nothing changed), -1 with an exception set on error. */
    static CYTHON_UNUSED int stormlet_values_as_slot(PyTypeObject *type, PyObject *probe, PyObject *values) {
        Py_ssize_t offset = sizeof(PyObject);
        PyObject *descr;
        int failed;
        while (offset + (Py_ssize_t)sizeof(PyObject *) <= type->tp_basicsize &&
               *(PyObject **)((char *)probe + offset) != values) {
            offset += sizeof(PyObject *);
        }
        if (offset + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize) {
            return 0;
        }
        stormlet_values_member.offset = offset;
        descr = PyDescr_NewMember(type, &stormlet_values_member);
        if (descr == NULL) {
            return -1;
        }
        failed = PyDict_SetItemString(type->tp_dict, "values", descr);
        Py_DECREF(descr);
        if (failed) {
            return -1;
        }
        PyType_Modified(type);
        return 1;
    }
    """
    int stormlet_values_as_slot(type cls, object probe, object values) except -1

cdef class StreamInfo:
    cdef public object component
    cdef public object stream
    cdef public list fields
    cdef public dict index
    cdef public object registry

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
