"""Benchmarks wired to benchmarks/figures.py after the first ones: the peer word count records a
row a run, which benchmarks/diary.py renders, and the scaling benchmark records the row of its
--work level and none for a sweep, a dial or a paced run."""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import BENCHMARKS, benchmark_module, imported_from


def records(folder: Path, benchmark: str) -> list[dict]:
    path = folder / f"{benchmark}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def results(tmp_path, monkeypatch):
    """A results folder of the test's own, recording on (the committed results stay as they are)."""
    folder = tmp_path / "results"
    monkeypatch.setenv("STORMLET_BENCH_RESULTS", str(folder))
    monkeypatch.setenv("STORMLET_BENCH_RECORD", "1")
    return folder


def test_the_peer_word_count_records_a_row_a_run_and_the_diary_shows_them(results, tmp_path):
    # Two of the runs, small: the plain loop and one stormlet run, each in its own process.
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "peers" / "wordcount.py"), "--sentences", "2000",
         "--only", "python,unacked"], capture_output=True, text=True, env=os.environ,
        timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = records(results, "peers")
    assert [r["measure"] for r in rows] == [
        "peer word count, 2,000 sentences, a fresh process a run: plain Python loop (split + dict)",
        "peer word count, 2,000 sentences, a fresh process a run: stormlet, acking off"]
    assert all(r["unit"] == "words/s" and r["value"] > 0 for r in rows)
    # Bytewax was not among the runs: each row says so instead of a ratio.
    assert all(r["detail"].startswith("Bytewax not run; ") and
               r["detail"].endswith(" words per CPU-second") for r in rows)
    assert rows[0]["command"] == ("python benchmarks/peers/wordcount.py --sentences 2000 "
                                  "--only python,unacked")

    with imported_from(BENCHMARKS, "diary") as diary:
        page = tmp_path / "LATEST.md"
        page.write_text(f"# Latest\n\n{diary.BEGIN}\n{diary.END}\n")
        assert diary.main(["--latest", str(page), "--results", str(results)]) == 0
    table = page.read_text()
    assert "| peer word count, 2,000 sentences, a fresh process a run: stormlet, acking off | " \
        in table and "words/s (Bytewax not run" in table


@pytest.fixture(scope="module")
def peers():
    """benchmarks/peers/wordcount.py as a module of another name: its runs import
    benchmarks/wordcount.py as ``wordcount``."""
    with imported_from(BENCHMARKS / "peers", "runs", tree=BENCHMARKS):
        spec = importlib.util.spec_from_file_location("peers_wordcount",
                                                      BENCHMARKS / "peers" / "wordcount.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module


def test_the_peer_rows_give_the_ratio_to_bytewax_and_its_median_over_rounds(peers):
    basic = next(r for r in peers.RUNS if r.name == "basic")
    bytewax = next(r for r in peers.RUNS if r.name == "bytewax")
    baseline = {"seconds": 1.0, "cpu_seconds": 0.5, "version": "0.21.1"}
    basic_result = {"seconds": 1.25, "cpu_seconds": 2.0}
    assert (peers.record_detail(basic, baseline, basic_result, None, 1, 1_000_000)
            == "0.80× Bytewax; 500,000 words per CPU-second")
    assert (peers.record_detail(basic, baseline, basic_result, 0.74, 3, 1_000_000)
            == "0.80× Bytewax, median of rounds 0.74×; 500,000 words per CPU-second; "
               "best of 3 rounds")
    assert (peers.record_detail(bytewax, baseline, baseline, None, 1, 1_000_000)
            == "Bytewax 0.21.1; 2,000,000 words per CPU-second")


scaling = benchmark_module("scaling")


RESULT = {"ratio": 1.234, "two_core_ratio": 1.5, "local_cpu_us": 20.04, "cluster_cpu_us": 26.7,
          "overhead_us": 6.7}


def test_a_scaling_run_at_one_work_level_records_its_row(scaling, results):
    args = argparse.Namespace(sweep=False, dial=None, rate=0.0, no_crossing=False, work=6.0,
                              record=False)
    scaling.record(args, RESULT, 2, 8.0)
    [row] = records(results, "scaling")
    assert row["measure"].startswith("realistic events on a cluster, ~6 µs of user work an "
                                     "event: two pinned workers against one process")
    assert row["value"] == "1.23× (1.50×); 20.0 / 26.7 µs"
    assert row["detail"] == "medians of 2 windows of 8 s"


@pytest.mark.parametrize("setting", [{"sweep": True}, {"dial": 40}, {"rate": 5000.0},
                                     {"no_crossing": True}])
def test_a_sweep_a_dial_a_paced_run_or_one_without_crossing_records_no_row(scaling, results,
                                                                           setting):
    args = argparse.Namespace(**{"sweep": False, "dial": None, "rate": 0.0, "no_crossing": False,
                                 "work": 6.0, "record": True, **setting})
    scaling.record(args, RESULT, 1, 6.0)
    assert records(results, "scaling") == []
