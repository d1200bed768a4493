"""Airflow UI plugin (Airflow layer)."""
