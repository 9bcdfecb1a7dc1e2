from bolts.redis_counter import RedisWordCounter
from spouts.words import WordSpout
from streamparse import Grouping, Topology


class RedisCounts(Topology):
    words = WordSpout.spec()
    counter = RedisWordCounter.spec(inputs={words: Grouping.fields("word")}, par=2)
