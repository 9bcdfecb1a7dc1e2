"""The ``stormlet`` command as a file spark-submit can run (it runs Python applications only from
a ``.py`` file, not from a module or a console script)::

    spark-submit --master spark://HOST:7077 \\
        "$(python -c 'import stormlet.cli.spark_submit as s; print(s.__file__)')" \\
        backfill app.py --input /shared/in --output /shared/out

The jobs then run on the master and with the ``--conf`` spark-submit was given (unless
``--master`` is also given to the command).
"""

from __future__ import annotations

import os
import sys


def _main() -> None:
    # Run as a script, the script's directory (stormlet/cli, or stormlet/spark for the old path
    # spark/submit.py) comes first on sys.path, where its modules (cluster.py, local.py, ...)
    # would shadow top-level modules of the same name that a topology imports.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if sys.path and os.path.dirname(os.path.abspath(sys.path[0] or ".")) == package:
        del sys.path[0]
    from stormlet.cli import main

    main(prog_name="stormlet")


if __name__ == "__main__":
    _main()
