"""Fail the install when the Python side of PySpark and its JVM jars disagree (the pyspark-client clash), or
when the compiled rows-event decoder or event framer was not built (the package would work, many times slower
on the binlog: a development or CI machine has a C compiler, so there it is a setup fault)."""
from __future__ import annotations

import sys
from importlib.metadata import entry_points
from pathlib import Path


def main() -> int:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    core = sorted(jars.glob("spark-core_*.jar"))
    if not core:
        print(f"no Spark jars under {jars}: the full pyspark package is missing (pyspark-client alone?)",
              file=sys.stderr)
        return 1
    jar_version = core[0].stem.rsplit("-", 1)[-1]
    if jar_version != pyspark.__version__:
        print(f"pyspark {pyspark.__version__} but Spark jars {jar_version}: pin pyspark and pyspark-client "
              "to the same version", file=sys.stderr)
        return 1
    providers = [ep for ep in entry_points(group="apache_airflow_provider")
                 if ep.value.startswith("airflow_provider_mysqlcdc")]
    if not providers:
        print("the apache_airflow_provider entry point is not registered", file=sys.stderr)
        return 1
    from airflow_provider_mysqlcdc.engine.binlog.rows_decoder import compiled_available, missing_reason

    if not compiled_available():
        print(missing_reason(), file=sys.stderr)
        return 1
    from airflow_provider_mysqlcdc.engine.binlog.event_framer import compiled as framer

    if framer.loaded() is None:
        print(framer.missing_reason(), file=sys.stderr)
        return 1
    print(f"install ok: pyspark {pyspark.__version__} with matching jars; provider entry point registered; "
          "compiled rows decoder and event framer loaded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
