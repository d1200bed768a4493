"""The CDC engine in plain Python (pymysql + mysql-replication): no Airflow, no Spark imports here."""
