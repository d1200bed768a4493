"""The snapshot phase on Spark: the mysql_cdc_snapshot data source, its writer, and one chunk group per application."""
