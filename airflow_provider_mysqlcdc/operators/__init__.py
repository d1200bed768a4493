"""Airflow operators (Airflow layer): they call the CLI/Spark layer, never re-implement it."""
