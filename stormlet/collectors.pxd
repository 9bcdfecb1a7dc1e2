# Types stormlet/collectors.py when it is compiled (see runtime/build_mode.py).

cdef class BasicOutputCollector:
    cdef object _collector
    cdef object _emit
    cdef public object input
