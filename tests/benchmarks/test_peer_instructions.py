"""benchmarks/peers/instructions.py's reading of the machine's caches and of callgrind's totals."""

from pathlib import Path

import pytest
from support import imported_from

PEERS = Path(__file__).resolve().parents[2] / "benchmarks" / "peers"


@pytest.fixture(scope="module")
def instructions():
    """The script as a module, imported from its folder; that folder's modules (runs.py,
    sentences.py, benchmarks/wordcount.py...) leave sys.modules and sys.path afterwards, so
    that no other test imports them by their plain names."""
    with imported_from(PEERS, "instructions", tree=PEERS.parent) as module:
        yield module


def describe(root: Path, index: int, level: int, kind: str, size: str, ways: int) -> None:
    cache = root / f"index{index}"
    cache.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size),
                        ("ways_of_associativity", ways), ("coherency_line_size", 64)):
        (cache / name).write_text(f"{value}\n")


def test_the_l1_caches_and_the_core_s_l2_are_simulated_and_the_l3_is_not(instructions, tmp_path):
    describe(tmp_path, 0, 1, "Data", "48K", 12)
    describe(tmp_path, 1, 1, "Instruction", "32K", 8)
    describe(tmp_path, 2, 2, "Unified", "1024K", 16)
    describe(tmp_path, 3, 3, "Unified", "32768K", 16)
    assert instructions.core_caches(tmp_path) == [
        "--I1=32768,8,64", "--D1=49152,12,64", "--LL=1048576,16,64"]


def test_a_machine_that_hides_its_l2_is_told_so(instructions, tmp_path):
    describe(tmp_path, 0, 1, "Data", "32K", 8)
    describe(tmp_path, 1, 1, "Instruction", "32K", 8)
    with pytest.raises(SystemExit, match="--LL"):
        instructions.core_caches(tmp_path)


def test_event_totals_pair_callgrind_s_event_names_with_its_totals(instructions, tmp_path):
    out = tmp_path / "callgrind.out"
    out.write_text("positions: line\nevents: Ir I1mr DLmr\nsummary: 10 2 1\n"
                   "fn=f\n1 10 2 1\ntotals: 10 2 1\n")
    assert instructions.event_totals(out) == {"Ir": 10, "I1mr": 2, "DLmr": 1}
