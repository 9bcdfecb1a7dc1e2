"""``stormlet backfill``: run a topology's bolts over a historical dataset in Spark.

    stormlet backfill topologies/word_count.py --input sentences.txt --output out/counts
    stormlet backfill topologies/log_word_count.py --input /data/sentences --output out/counts \\
        --master spark://host:7077 -c wordcount.output.dir=/shared/counts
    stormlet backfill app.py --input events.jsonl --spout events --component totals --output out

Progress is reported every few seconds; at the end a line per component gives its counts. The
exit status is 1 on a bad argument, an unreadable input or a failed Spark job, and also when a
bolt raised (or input records did not fit the spout) unless ``--allow-errors`` is given: the
output is written either way.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from .options import conf_option, conf_overrides

log = logging.getLogger(__name__)


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--input", "input_path", required=True, metavar="PATH",
              help="the dataset: a stormlet partitioned log, text files (a message per line) or "
                   "JSON Lines; a local path, or any path Spark reads (hdfs://, s3a://, a glob)")
@click.option("--output", required=True, metavar="PATH",
              help="where the JSON Lines go (a directory; several streams get a subdirectory "
                   "each: OUTPUT/COMPONENT/STREAM)")
@click.option("--format", "input_format", default="auto", show_default=True,
              type=click.Choice(["auto", "log", "text", "jsonl"]),
              help="what the input holds; auto: a log if it is one, jsonl for *.jsonl, "
                   "*.ndjson and *.json, else text")
@click.option("--spout", default=None, help="the spout the input replaces (needed when the "
                                            "topology has several)")
@click.option("--spout-stream", default=None,
              help="the spout stream the input fills (default: its default stream)")
@click.option("--component", "components", multiple=True, metavar="BOLT",
              help="write this bolt's streams instead of the leaf bolts', repeatable; only it "
                   "and the bolts it reads from run")
@click.option("--master", default=None,
              help="Spark master URL (default: spark-submit's --master when run by "
                   "spark-submit, else a local session on every core, local[*])")
@conf_option("topology config override, repeatable")
@click.option("--name", default=None, help="topology name (default: the file's stem)")
@click.option("--overwrite", is_flag=True, help="replace OUTPUT if it exists")
@click.option("--allow-errors", is_flag=True,
              help="exit 0 even if bolts raised or input records were bad (they are reported)")
@click.option("--progress-every", type=click.FloatRange(min=0.1), default=5.0,
              show_default=True, help="seconds between progress lines")
def backfill(file: Path, input_path: str, output: str, input_format: str, spout: str | None,
             spout_stream: str | None, components: tuple[str, ...], master: str | None,
             conf_pairs: tuple[str, ...], name: str | None, overwrite: bool, allow_errors: bool,
             progress_every: float) -> None:
    """Run the bolts of the topology in FILE over a historical dataset, in Spark."""
    from ..spark.backfill import Backfill, BackfillError, InputOptions
    from ..spark.session import SparkUnavailable, quiet_py4j, spark_session

    overrides = conf_overrides(conf_pairs)
    quiet_py4j()
    try:
        job = Backfill(file, InputOptions(input_path, input_format), spout=spout,
                       spout_stream=spout_stream, components=components, conf=overrides,
                       name=name)
        job.check_output(output, overwrite)
        # Our progress lines name the bolts; Spark's own bar would only interleave with them.
        with spark_session(f"stormlet-backfill-{job.name}", master,
                           conf={"spark.ui.showConsoleProgress": "false"}) as spark:
            if not log.isEnabledFor(logging.DEBUG):
                # A failed task is logged by three Spark classes, each with the worker's
                # traceback and pages of Java frames; the error that ends the job is reported in
                # one line below. --log-level DEBUG keeps Spark's warnings.
                spark.sparkContext.setLogLevel("FATAL")
            result = job.run(spark, output, overwrite=overwrite,
                             progress=lambda line: click.echo(line, err=True),
                             progress_interval=progress_every)
    except (BackfillError, SparkUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    _summary(result)
    problems = result.errors + result.bad_input
    if problems and not allow_errors:
        raise click.ClickException(
            f"{result.errors} errors in bolts and {result.bad_input} bad input records (samples "
            f"above); the output is written but incomplete; --allow-errors accepts that")


def _summary(result: Any) -> None:
    rate = result.messages / result.seconds if result.seconds else 0.0
    partitions = result.components[result.spout].get("partitions", 0)
    click.echo(f"backfill {result.name}: {result.messages:,} messages from {result.input.path} "
               f"({result.input.kind}, {partitions} partitions) as spout {result.spout!r}, in "
               f"{result.seconds:.1f} s ({rate:,.0f} messages/s)")
    header = ("component", "tasks", "executed", "emitted", "acked", "failed", "errors")
    rows = []
    for cid, c in result.components.items():
        emitted = sum(c.get("emitted", {}).values())
        if cid == result.spout:
            rows.append((cid, "-", "-", emitted, "-", "-", c.get("bad_input", 0)))
        else:
            rows.append((cid, c.get("tasks", 0), c.get("executed", 0), emitted, c.get("acked", 0),
                         c.get("failed", 0), c.get("errors", 0)))
    widths = [max(len(_cell(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(_cell(v).ljust(w) if i == 0 else _cell(v).rjust(w)
                             for i, (v, w) in enumerate(zip(row, widths))))
    for out in result.outputs:
        click.echo(f"wrote {out.tuples:,} tuples of {out.component} stream {out.stream!r} to "
                   f"{out.path}")
    if not result.outputs:
        click.echo("nothing written: the bolts that ran declare no output streams")
    if result.failed:
        click.echo(f"{result.failed:,} tuples were failed by bolts; streaming would have "
                   f"replayed their messages, a backfill does not", err=True)
    reported = sum(c.get("reported", 0) for c in result.components.values())
    if reported:
        click.echo(f"{reported:,} errors were reported by bolts (report_error)", err=True)
    if result.bad_input:
        click.echo(f"{result.bad_input:,} input records did not fit spout {result.spout!r} and "
                   f"were skipped", err=True)
    if result.samples():
        click.echo("first errors:", err=True)
    for text in result.samples():
        click.echo(f"  {text}", err=True)


def _cell(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)
