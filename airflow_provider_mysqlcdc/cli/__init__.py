"""The mysqlcdc command: the engine without Airflow."""
