"""The pipeline's metrics, sent through Airflow's metrics (StatsD, Datadog or OpenTelemetry, as configured).

The stream runs for days inside one Airflow task that waits on ``spark-submit``. Its Spark driver records what
each batch did in the engine's progress record (``engine.lake.stream_figures``); a small thread of the task
process (``stream_watcher``) reads that record and the server (lag, binlog headroom) every few seconds and
sends the figures through Airflow's metrics facade, so the backend the user configured for Airflow is the one
used, and neither the engine nor Spark knows Airflow. The watcher also sends when the stream is stuck (no
batch commits, the lag grows): what alerts are for. Snapshot tasks send their tables' chunk progress.
Nothing runs when Airflow's metrics are off. ``names`` lists every metric (docs/monitoring.md shows them).
"""
