"""Process-wide settings for processes stormlet owns (``stormlet local``, workers)."""

from __future__ import annotations

import gc

# Tuples, their value lists and batches are short-lived container objects allocated by the
# hundred thousand per second. CPython 3.11's default gen-0 threshold (700) runs a collection
# every few hundred tuples, which costs about 15% of word-count throughput; a larger threshold
# keeps the same collector at a fraction of the cost.
GEN0_THRESHOLD = 50_000


def tune_for_streaming() -> None:
    """Apply stormlet's process settings. Called by the CLI and workers, never by the library
    on its own, since these are process-wide."""
    _gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(_gen0, GEN0_THRESHOLD), gen1, gen2)
    gc.freeze()  # what was loaded at start-up is never garbage: keep it out of every collection
