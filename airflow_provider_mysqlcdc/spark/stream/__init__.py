"""The stream phase on Spark: the mysql_cdc_binlog streaming
source, the changelog sink, the streaming query."""
