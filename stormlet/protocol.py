"""Names shared by every part of the runtime: system streams, system components and message kinds.

A message between executors is ``(kind, dest_task, src_task, payload)``; the payload of each
kind is described next to its constant. Acker and spout control payloads are flat lists so that a
batch of a thousand acks is one list, not a thousand small objects.
"""

from __future__ import annotations

DEFAULT_STREAM = "default"
TICK_STREAM = "__tick"
SYSTEM_COMPONENT = "__system"
ACKER_COMPONENT = "__acker"
SYSTEM_TASK = -1

# Data: payload is a list of Tuple objects addressed to dest_task.
DATA = 0
# Tick: payload is None; the executor turns it into a tick tuple for dest_task.
TICK = 1

# To an acker task (src_task is the sender).
ACK_INIT = 10      # [root, xor_of_edges, spout_task, ...]
ACK_ACK = 11       # {root: xor_value}: acks for one root combined by the sender
ACK_FAIL = 12      # [root, kind, message, ...]
ACK_RESET = 13     # [root, ...]
ACK_TIMEOUT = 14   # [root, ...]  the spout gave up: report who the tree reached, then forget it

# From an acker to a spout task.
SPOUT_ACK = 20     # [root, ...]
SPOUT_FAIL = 21    # [root, kind, component, message, ...]
SPOUT_RESET = 22   # [root, ...]

STOP = 30          # payload is None: finish what is queued, then stop

# Between workers, from and to SYSTEM_TASK: [task, overloaded (1/0), ...] (cluster/backpressure.py).
BACKPRESSURE = 40
