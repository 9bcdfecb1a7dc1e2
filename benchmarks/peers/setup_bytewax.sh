#!/usr/bin/env bash
# Bytewax in its own virtualenv, beside this script (it is not a stormlet dependency):
#     bash benchmarks/peers/setup_bytewax.sh
# creates benchmarks/peers/.venv-bytewax, which benchmarks/peers/wordcount.py runs by default.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-bytewax"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet bytewax==0.21.1
"$venv/bin/python" -c "import sys, importlib.metadata as m; import bytewax
print('bytewax', m.version('bytewax'), 'on python', sys.version.split()[0], 'in', sys.prefix)"
