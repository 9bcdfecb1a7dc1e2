import redis
from streamparse import Bolt


class RedisWordCounter(Bolt):
    """Counts words in the Redis hash "wordcount" (the server's port: test.redis.port)."""

    outputs = []

    def initialize(self, conf, ctx):
        self.redis = redis.Redis(host="127.0.0.1", port=int(conf["test.redis.port"]))

    def process(self, tup):
        self.redis.hincrby("wordcount", tup.values.word, 1)
