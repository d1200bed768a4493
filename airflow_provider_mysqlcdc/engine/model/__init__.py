"""Shared value types: tables and columns, canonical values,
binlog positions, resume offsets, records, Arrow batches."""
