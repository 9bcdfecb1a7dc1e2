"""The names of the streams and components the system itself adds to a topology: what a user's
code may meet (a tick tuple's stream, the default stream) and what the runtime routes by.

One definition, at the API's level: the runtime (``runtime/protocol.py``) and the state feature
(``state/checkpoint.py``) import these, so the runtime needs nothing of a feature built on it.
"""

DEFAULT_STREAM = "default"
TICK_STREAM = "__tick"
SYSTEM_COMPONENT = "__system"
ACKER_COMPONENT = "__acker"
SYSTEM_TASK = -1
#: The spout stateful topologies get, and the stream it drives their checkpoints on.
CHECKPOINT_COMPONENT = "__checkpointspout"
CHECKPOINT_STREAM = "__checkpoint"
