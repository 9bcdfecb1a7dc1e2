"""What the test topologies did, as JSON lines in the directory the test passes as the
topology config "test.output.dir" (one file per task)."""

import json
import os


def record(component, event, **fields):
    directory = component.storm_conf["test.output.dir"]
    path = os.path.join(directory, f"{component.component_name}-{component.task_id}.jsonl")
    with open(path, "a") as out:
        out.write(json.dumps({"event": event, "task": component.task_id, **fields}) + "\n")
