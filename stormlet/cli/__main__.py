"""``python -m stormlet.cli``: the ``stormlet`` command."""

from . import main

if __name__ == "__main__":
    main()
