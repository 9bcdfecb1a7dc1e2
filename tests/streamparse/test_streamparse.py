"""streamparse projects run unmodified: the projects under streamparse_projects/ are written as
streamparse projects (config.json, topologies/, src/, ``from streamparse import ...``) and run
through stormlet's loader, in a LocalCluster or through ``stormlet local``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from redis_server import redis_server  # noqa: F401
from support import running, wait_until

from stormlet.loader import load_topology_file

PROJECTS = Path(__file__).resolve().parents[1] / "streamparse_projects"
WORDCOUNT = PROJECTS / "wordcount"
FEATURES = PROJECTS / "features"
# The word list of the features project's WordSpout (spouts/words.py).
WORDS = ("apple avocado banana blueberry cherry cranberry date dragonfruit elderberry fig "
         "grape guava kiwi lemon lime mango melon nectarine orange papaya peach pear plum "
         "quince raspberry strawberry tangerine ugli vanilla watermelon").split()


def events(directory: Path, component: str | None = None) -> list[dict]:
    """Every event the project's recorder wrote (of one component's tasks, if named)."""
    found = []
    for path in sorted(directory.glob(f"{component or '*'}-*.jsonl")):
        found += [json.loads(line) for line in path.read_text().splitlines() if line]
    return found


def run_cli(*args: str, cwd: Path, env_path: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    env = None
    if env_path is not None:
        import os
        env = dict(os.environ, PYTHONPATH=env_path)
    return subprocess.run([sys.executable, "-m", "stormlet", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_quickstart_word_count_runs_from_its_project_root_with_stormlet_local(tmp_path):
    # A package named streamparse that cannot be imported stands in for the real one: stormlet
    # must run the topology itself, whatever streamparse is installed.
    impostor = tmp_path / "site" / "streamparse"
    impostor.mkdir(parents=True)
    (impostor / "__init__.py").write_text("raise ImportError('the real streamparse was used')\n")
    result = run_cli("local", "topologies/wordcount.py", "--duration", "2", cwd=WORDCOUNT,
                     env_path=str(impostor.parent))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()
            if line.startswith(("word_spout", "count_bolt"))}
    assert rows["count_bolt"][1] == "2"                 # par=2
    executed = int(rows["count_bolt"][3])
    assert executed > 1000 and int(rows["count_bolt"][4]) == executed   # auto-acked
    # self.logger works, from the counting tasks
    assert "INFO streamparse.count_bolt: counted [1,000] words" in result.stderr


def test_a_reliable_spout_replays_what_a_bolt_fails_or_raises_on_and_gives_up_after_max_fails(
        tmp_path):
    topology, conf = load_topology_file(FEATURES / "topologies" / "reliable.py")
    assert conf == {"topology.message.timeout.secs": 20}
    conf.update({"test.output.dir": str(tmp_path), "test.count": 100})
    with running(topology, conf, name="reliable"):
        wait_until(lambda: len({e["n"] for e in events(tmp_path, "numbers")
                                if e["event"] == "ack"}) == 100, 30, "every number acked")
    spout = events(tmp_path, "numbers")
    acks = Counter(e["n"] for e in spout if e["event"] == "ack")
    fails = Counter(e["n"] for e in spout if e["event"] == "fail")
    assert acks == Counter(range(100))                       # each acked exactly once
    # raised on once (n % 10 == 3) or failed once by hand (n % 10 == 7): one replay each; 42 is
    # failed every time: replayed max_fails (2) times, then given up (acked by the spout)
    assert fails == Counter({n: 1 for n in range(100) if n % 10 in (3, 7)} | {42: 3})
    seen = Counter(e["n"] for e in events(tmp_path, "sink"))
    assert set(seen) == set(range(100)) - {42}
    assert all(e["source"] == "flaky" and e["stream"] == "default"
               for e in events(tmp_path, "sink"))


def test_batching_bolts_group_by_key_on_ticks_and_ack_each_tuple_with_its_batch(tmp_path):
    topology, conf = load_topology_file(FEATURES / "topologies" / "batching.py")
    conf.update({"test.output.dir": str(tmp_path), "test.rounds": 3})
    words = WORDS * 3
    with running(topology, conf, name="batching"):
        wait_until(lambda: len([e for e in events(tmp_path, "words") if e["event"] == "ack"])
                   == len(words), 30, "every word acked")
    spout = events(tmp_path, "words")
    assert Counter(e["id"] for e in spout if e["event"] == "ack") == Counter(range(len(words)))
    assert not [e for e in spout if e["event"] == "fail"]
    for component in ("by_letter", "timed"):
        batches = [e for e in events(tmp_path, component) if e["event"] == "batch"]
        # every word in exactly one batch of each bolt
        assert Counter(w for b in batches for w in b["words"]) == Counter(words), component
    for batch in (e for e in events(tmp_path, "by_letter") if e["event"] == "batch"):
        assert {w[0] for w in batch["words"]} == {batch["key"]}
    # the tickless bolt batches on time: more than one batch, none keyed
    timed = [e for e in events(tmp_path, "timed") if e["event"] == "batch"]
    assert len(timed) >= 1 and {b["key"] for b in timed} == {None}


def test_named_streams_and_direct_emits_reach_the_declared_streams_and_the_chosen_tasks(
        tmp_path):
    topology, conf = load_topology_file(FEATURES / "topologies" / "streams.py")
    conf["test.output.dir"] = str(tmp_path)
    with running(topology, conf, name="streams"):
        wait_until(lambda: len([e for e in events(tmp_path, "numbers") if e["event"] == "ack"])
                   == 40, 30, "every tuple of both streams acked")
    assert {e["id"] for e in events(tmp_path, "numbers")} == (
        {f"n{n}" for n in range(20)} | {f"s{n}" for n in range(20)})
    routed = events(tmp_path, "router")
    assert sorted(e["n"] for e in routed) == list(range(20))
    assert all(e["sent_to"] == [e["target"]] for e in routed)   # need_task_ids
    assert len({e["target"] for e in routed}) == 2
    got = events(tmp_path, "collector")
    assert sorted(e["n"] for e in got) == list(range(20))
    assert all(e["task"] == e["target"] and e["stream"] == "routed" and e["source"] == "router"
               for e in got)
    squares = events(tmp_path, "squares")
    assert sorted((e["n"], e["square"]) for e in squares) == [(n, n * n) for n in range(20)]
    assert {e["stream"] for e in squares} == {"squares"}


@pytest.mark.parametrize("file, component, words", [
    ("refused_java.py", "kafka_spout", ["org.apache.storm.kafka.spout.KafkaSpout", "JVM",
                                        "KafkaSpout (stormlet.sources)"]),
    ("refused_shell.py", "split", ["'node splitsentence.js'", "streamparse Bolt in Python"]),
])
def test_jvm_and_non_python_shell_components_are_refused_at_load_naming_the_component(
        tmp_path, file, component, words):
    result = run_cli("local", f"topologies/{file}", "--duration", "1", cwd=FEATURES)
    assert result.returncode != 0
    assert f"component {component!r}" in result.stderr
    for word in words:
        assert word in result.stderr
    assert "ran" not in result.stdout          # nothing started


def test_a_bolt_using_the_redis_client_counts_every_word_in_a_real_redis_server(
        tmp_path, redis_server):
    topology, conf = load_topology_file(FEATURES / "topologies" / "redis_counts.py")
    conf.update({"test.output.dir": str(tmp_path), "test.rounds": 4,
                 "test.redis.port": redis_server.port})
    client = redis_server.client()
    client.delete("wordcount")
    with running(topology, conf, name="redis_counts"):
        wait_until(lambda: len([e for e in events(tmp_path, "words") if e["event"] == "ack"])
                   == 4 * len(WORDS), 30, "every word acked")
    counts = {k.decode(): int(v) for k, v in client.hgetall("wordcount").items()}
    assert counts == dict(Counter(WORDS * 4))


def test_the_dsl_refuses_what_streamparse_refuses_with_its_messages():
    from stormlet.streamparse import Bolt, Grouping, Spout, Stream, Topology

    class Words(Spout):
        outputs = ["word"]

    class Count(Bolt):
        outputs = ["word", "count"]

    with pytest.raises(ValueError, match='Count "count" requires at least one input'):
        type("NoInputs", (Topology,), {"words": Words.spec(), "count": Count.spec()})
    with pytest.raises(ValueError, match="A Topology requires at least one Spout"):
        type("NoSpouts", (Topology,), {})
    words = Words.spec()
    with pytest.raises(ValueError, match="Field 'wrod' specified in grouping is not a valid "
                                         "output field for the 'words' 'default' stream"):
        type("Typo", (Topology,), {"words": words,
                                   "count": Count.spec(inputs={words: Grouping.fields("wrod")})})
    with pytest.raises(ValueError, match="Duplicate component name: twice"):
        type("Twice", (Topology,), {"a": Words.spec(name="twice"), "b": Words.spec(name="twice")})
    with pytest.raises(TypeError, match="Did you forget to call the spec class method"):
        type("Unspecced", (Topology,), {"words": Words()})
    with pytest.raises(KeyError, match="Invalid stream for words: 'nope'"):
        words["nope"]
    with pytest.raises(ValueError, match="Parallelism hint must be an integer greater than 0"):
        Count.spec(inputs=[words], par=0)
    with pytest.raises(TypeError, match="Stream fields must be a list"):
        Stream("word")


def test_emits_are_checked_as_streamparse_checks_them_and_anchoring_after_an_ack_is_refused(
        tmp_path):
    from stormlet.streamparse import Bolt, Grouping, Spout, Topology

    problems = []

    class Once(Spout):
        outputs = ["n"]

        def initialize(self, conf, ctx):
            self.sent = False

        def next_tuple(self):
            if not self.sent:
                self.sent = True
                try:
                    self.emit("not a list")
                except TypeError as exc:
                    problems.append(str(exc))
                self.emit([1], tup_id="one")

        def ack(self, tup_id):
            problems.append(f"acked {tup_id}")

    class AcksThenEmits(Bolt):
        outputs = ["n"]

        def process(self, tup):
            self.ack(tup)
            try:
                self.emit([tup.values.n])          # auto-anchored onto the acked tuple
            except ValueError as exc:
                problems.append(str(exc))

    spec = type("Checks", (Topology,),
                {"once": (once := Once.spec()),
                 "bolt": AcksThenEmits.spec(inputs={once: Grouping.SHUFFLE})})
    from stormlet.streamparse.build import build
    topology, conf = build(spec)
    with running(topology, conf, name="checks"):
        wait_until(lambda: "acked one" in problems, 20, "the spout's tuple acked")
    assert problems[0].startswith("All Tuples must be either lists or tuples")
    assert "bolt 'bolt': Anchored onto tuple 1 after it was acked or failed" in problems[1]


def test_a_raising_process_batch_fails_its_batch_only_and_a_shell_spec_runs_a_python_class(
        tmp_path):
    from stormlet.streamparse import BatchingBolt, Grouping, ReliableSpout, ShellBolt, Topology
    from stormlet.streamparse.build import build

    outcome = {"acked": [], "failed": []}

    class Letters(ReliableSpout):
        outputs = ["word"]

        def initialize(self, conf, ctx):
            self.todo = ["ant", "bee", "bat", "cow"]

        def next_tuple(self):
            if self.todo:
                word = self.todo.pop(0)
                self.emit([word], tup_id=word)

        def ack(self, tup_id):
            outcome["acked"].append(tup_id)
            super().ack(tup_id)

        def fail(self, tup_id):
            outcome["failed"].append(tup_id)
            super().fail(tup_id)

    class ByLetter(BatchingBolt):
        config = {"topology.tick.tuple.freq.secs": 0.1}

        def initialize(self, conf, ctx):
            self.raised = False

        def group_key(self, tup):
            return tup.values.word[0]

        def process_batch(self, key, tups):
            if key == "b" and not self.raised:
                self.raised = True
                raise RuntimeError("b is bad once")

    # A ShellBolt whose command is a Python component's runs that class, as streamparse runs it
    ByLetter.__qualname__ = ByLetter.__name__
    import types
    module = types.ModuleType("sp_batch_test_module")
    module.ByLetter = ByLetter
    ByLetter.__module__ = module.__name__
    sys.modules[module.__name__] = module
    try:
        letters = Letters.spec()
        topology_class = type("Batches", (Topology,), {
            "letters": letters,
            "batches": ShellBolt.spec(command="streamparse_run",
                                      script="sp_batch_test_module.ByLetter",
                                      inputs={letters: Grouping.GLOBAL},
                                      config=ByLetter.config)})
        topology, conf = build(topology_class)
        assert isinstance(topology.components["batches"].obj.bolt_class(), ByLetter)
        with running(topology, conf, name="batches"):
            wait_until(lambda: len(outcome["acked"]) == 4, 20, "every word acked")
    finally:
        del sys.modules[module.__name__]
    assert sorted(outcome["acked"]) == ["ant", "bat", "bee", "cow"]
    assert sorted(outcome["failed"]) == ["bat", "bee"]      # the "b" batch, once, and only it
