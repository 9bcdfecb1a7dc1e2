"""``python -m stormlet``: the ``stormlet`` command, run by the interpreter at hand; a supervisor
starts its workers this way (``python -m stormlet worker ...``), with its own interpreter."""

from .cli import main

if __name__ == "__main__":
    main()
