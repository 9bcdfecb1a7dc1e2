from src.bolts.sink import SinkBolt
from streamparse import JavaSpout, Topology


class FromKafka(Topology):
    kafka_spout = JavaSpout.spec(
        full_class_name="org.apache.storm.kafka.spout.KafkaSpout", args_list=[],
        outputs=["n"])
    sink = SinkBolt.spec(inputs=[kafka_spout])
