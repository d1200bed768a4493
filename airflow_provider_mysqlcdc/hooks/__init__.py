"""Airflow hooks (Airflow layer)."""
