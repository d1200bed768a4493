"""Triggers: what deferred tasks wait on, in Airflow's triggerer."""
