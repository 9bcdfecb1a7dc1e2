# Types stormlet/runtime/bolt_executor.py when it is compiled (see runtime/build_mode.py).

from stormlet.collectors cimport BasicOutputCollector
from stormlet.runtime.task_collectors cimport BoltCollector
