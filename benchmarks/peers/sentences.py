"""The peer benchmark's input: N deterministic sentences, the same for every runner.

Standard library only, so the Bytewax runner (in its own virtualenv, without stormlet) imports it
as well. The vocabulary is benchmarks/wordcount.py's ``WORDS``, written out again here for that
reason.
"""

from __future__ import annotations

import collections
import random

WORDS = ("the cow jumped over the moon an apple a day keeps the doctor away four score and seven "
         "years ago snow white and the seven dwarfs i am at two with nature").split()
WORDS_PER_SENTENCE = 10
SEED = 42
DEFAULT_N = 200_000


def sentences(n: int = DEFAULT_N) -> list[str]:
    """``n`` sentences of ``WORDS_PER_SENTENCE`` words, each a seeded random choice of ``WORDS``."""
    rng = random.Random(SEED)
    choice = rng.choice
    return [" ".join([choice(WORDS) for _ in range(WORDS_PER_SENTENCE)]) for _ in range(n)]


def expected_counts(items: list[str]) -> collections.Counter:
    """The reference answer every run's counts must equal exactly."""
    return collections.Counter(word for sentence in items for word in sentence.split())
