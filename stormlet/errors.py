"""Errors a user's topology meets before it runs (imported by the builder and the components,
which the builder itself imports, so it lives apart from both)."""


class TopologyError(ValueError):
    """A topology that cannot run; the message names the component and the problem."""
