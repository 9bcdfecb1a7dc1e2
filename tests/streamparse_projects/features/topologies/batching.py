"""Batching bolts: grouped by key every tick, and every few tenths of a second without ticks."""

from bolts.batchers import FirstLetterBatcher, TimedBatcher
from spouts.words import WordSpout
from streamparse import Grouping, Topology


class Batching(Topology):
    words = WordSpout.spec()
    by_letter = FirstLetterBatcher.spec(inputs={words: Grouping.SHUFFLE}, par=2)
    timed = TimedBatcher.spec(inputs=[words])
