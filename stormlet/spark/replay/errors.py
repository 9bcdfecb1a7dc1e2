"""The error of a replay: what the user is told when one cannot run or finish."""


class ReplayError(Exception):
    """The replay cannot run or finish; the message names the path, target or run and says what
    to do. Nothing was written unless the message says so."""
