"""stormlet's Spark daemon (``stormlet.spark.daemon``): PySpark's, run from the installed package
when Spark's ``pyspark.zip`` is the same version; and the session setting that names it, unless
the user's configuration names another daemon."""

from __future__ import annotations

import sys
import zipfile

import pytest

from stormlet.spark.daemon import prefer_installed
from stormlet.spark.session import DAEMON_MODULE, _user_sets

pyspark = pytest.importorskip("pyspark")


def shipped_zip(tmp_path, version: str) -> str:
    path = tmp_path / "python" / "lib" / "pyspark.zip"
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pyspark/version.py", f"__version__: str = '{version}'\n")
    return str(path)


def test_the_installed_pyspark_goes_first_only_when_it_is_the_zips_version(tmp_path):
    same = shipped_zip(tmp_path / "a", pyspark.__version__)
    other = shipped_zip(tmp_path / "b", "0.0.1")
    rest = [p for p in sys.path if not p.endswith("pyspark.zip")]
    assert prefer_installed([same, *rest]) == [*rest, same]
    assert prefer_installed([other, *rest]) == [other, *rest]
    # No PySpark installed beside the zip: the zip stays first.
    assert prefer_installed([same, str(tmp_path)]) == [same, str(tmp_path)]
    assert prefer_installed(rest) == rest


@pytest.mark.parametrize("line", ["spark.python.daemon.module mine",
                                  "spark.python.daemon.module=mine",
                                  "  spark.python.daemon.module:mine"])
def test_a_daemon_named_in_spark_defaults_is_the_users(tmp_path, monkeypatch, line):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    (tmp_path / "spark-defaults.conf").write_text(f"# {DAEMON_MODULE}\n{line}\n")
    assert _user_sets("spark.python.daemon.module", None)
    (tmp_path / "spark-defaults.conf").write_text("# spark.python.daemon.module x\n"
                                                  "spark.python.daemon.modules y\n")
    assert not _user_sets("spark.python.daemon.module", None)
