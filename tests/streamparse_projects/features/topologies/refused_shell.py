from spouts.words import WordSpout
from streamparse import ShellBolt, Topology


class NodeSplit(Topology):
    words = WordSpout.spec()
    split = ShellBolt.spec(command="node", script="splitsentence.js", inputs=[words],
                           outputs=["word"])
