"""The snapshot phase on Spark: a snapshot run as one Spark job (``chunk_group``, ``tasks``), its writes and
commits (``writer``), and the mysql_cdc_snapshot data source for reading chunks as a DataFrame."""
