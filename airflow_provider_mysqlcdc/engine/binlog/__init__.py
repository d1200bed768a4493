"""The binlog: reading row changes between offsets, the schema of each event, DDL, transaction boundaries,
GTIDs."""
