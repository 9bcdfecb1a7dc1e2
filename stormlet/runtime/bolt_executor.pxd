# Types stormlet/runtime/bolt_executor.py when it is compiled (see stormlet/build_mode.py).

from stormlet.collectors cimport BasicOutputCollector
from stormlet.runtime.collector cimport BoltCollector
