# Types stormlet/serialization.py when it is compiled (see stormlet/build_mode.py): the
# collectors call the value check as a C function.

cpdef list checked(object values, object stream, object component)
