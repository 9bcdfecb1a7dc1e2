"""stormlet's version: written here once, read by the package's front (``stormlet.__version__``),
by the packaging (pyproject.toml's dynamic version) and by the daemons that record it, none of
which need the rest of the package for it."""

__version__ = "0.1.0"
