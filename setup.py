"""Packaging entry point. Exact versions for reproducible installs live in constraints.txt."""
from pathlib import Path

from setuptools import Extension, find_packages, setup

ROOT = Path(__file__).parent
version = {}
# our own __init__.py, read without importing the package (its dependencies may not be installed yet)
exec((ROOT / "airflow_provider_mysqlcdc" / "__init__.py").read_text(), version)  # noqa: S102 - see above


def compiled_extensions() -> list:
    """The compiled rows-event decoder (engine/binlog/rows_decoder/_rows.pyx) and event framer
    (engine/binlog/event_framer/_frames.pyx), built with the machine's C compiler. Optional: where they cannot
    be built the package still installs, and each says once in the log that the pure-Python path is used."""
    try:
        from Cython.Build import cythonize
    except ImportError:  # pyproject.toml's [build-system] provides Cython; a bare `setup.py` run may not
        print("warning: Cython is not installed: the compiled rows decoder is not built")
        return []
    extensions = [
        Extension(
            f"airflow_provider_mysqlcdc.engine.binlog.{package}.{name}",
            [f"airflow_provider_mysqlcdc/engine/binlog/{package}/{name}.pyx"],
            extra_compile_args=["-O2"],
            optional=True,
        )
        # the rows-event decoder, and the framer of the event stream (engine/binlog/event_framer)
        for package, name in (("rows_decoder", "_rows"), ("event_framer", "_frames"))
    ]
    return cythonize(extensions, compiler_directives={"language_level": "3"}, quiet=True)


setup(
    name="airflow-provider-mysqlcdc",
    version=version["__version__"],
    description="Lock-free, parallel, exactly-once MySQL snapshot and binlog stream on Spark, run by Airflow",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["airflow_provider_mysqlcdc", "airflow_provider_mysqlcdc.*"]),
    ext_modules=compiled_extensions(),
    # the spark-submit entry points the operators submit (found by operators/spark_apps.py)
    data_files=[("share/airflow-provider-mysqlcdc/spark_apps",
                 ["spark_apps/snapshot_chunks.py", "spark_apps/binlog_stream.py",
                  "spark_apps/snapshot_runner.py"])],
    install_requires=[
        "apache-airflow>=3.1,<4",
        "apache-airflow-providers-apache-spark>=6.0,<7",
        # The Spark provider pulls pyspark-client, which writes its own `pyspark` module over the full
        # package: both must be the same version or the Python side and the JVM jars disagree.
        "pyspark==4.2.0",
        "pyspark-client==4.2.0",
        "pymysql>=1.1,<2",
        "mysql-replication==1.0.17",
        "pyarrow>=16",
        # the native chunk reader (engine/snapshot/native_read): Arrow from the wire in the chunk's read view
        "connectorx>=0.4.6,<0.5",
        "sqlalchemy>=2.0,<2.2",
        # the lake's Delta tables (engine/lake/delta_changelog): written by delta-rs, no JVM needed
        "deltalake==1.6.6",
        # the mirror's Delta deletion vectors (engine/lake/deletion_vectors): Roaring bitmaps
        "pyroaring==1.0.3",
    ],
    extras_require={
        "postgres": ["psycopg[binary]>=3.2,<4"],
        # lineage: the operators report OpenLineage through Airflow's provider (docs/lineage.md)
        "openlineage": ["apache-airflow-providers-openlineage>=2.20,<3"],
        "bench": ["psutil>=5.9", "matplotlib>=3.9,<4"],
        "test": ["pytest>=8", "pytest-timeout>=2.3", "pandas>=2.2,<3", "psycopg[binary]>=3.2,<4",
                 "duckdb>=1.1", "polars==2.1.0", "apache-airflow-providers-openlineage>=2.20,<3",
                 "selenium>=4.20,<5",
                 # Airflow's StatsD metrics backend (apache-airflow[statsd]): the metrics tests' listener
                 "statsd>=4,<5",
                 "import-linter==2.16", "hypothesis==6.140.0", "ruff==0.17.6", "mypy==2.4.1"],
    },
    entry_points={
        "apache_airflow_provider": [
            "provider_info=airflow_provider_mysqlcdc.get_provider_info:get_provider_info",
        ],
        "console_scripts": ["mysqlcdc=airflow_provider_mysqlcdc.cli.main:main"],
        "airflow.plugins": ["mysqlcdc = airflow_provider_mysqlcdc.plugins.mysqlcdc_plugin:MySqlCdcPlugin"],
    },
    classifiers=[
        "Framework :: Apache Airflow",
        "Framework :: Apache Airflow :: Provider",
        "Programming Language :: Python :: 3.11",
    ],
)
