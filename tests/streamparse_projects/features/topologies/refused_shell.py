from streamparse import ShellBolt, Topology

from spouts.words import WordSpout


class NodeSplit(Topology):
    words = WordSpout.spec()
    split = ShellBolt.spec(command="node", script="splitsentence.js", inputs=[words],
                           outputs=["word"])
