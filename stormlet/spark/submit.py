"""The old path of ``stormlet/cli/spark_submit.py`` (the ``stormlet`` command as a file
spark-submit can run), kept so that scripts naming it go on working. It imports the CLI only when
run as a file: the spark package itself stays below the CLI.  (layout-move: keep)
"""

import os
import runpy

if __name__ == "__main__":
    runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "cli", "spark_submit.py"), run_name="__main__")
