"""What every task of a pipeline shares (Airflow-free): its settings, and the record of it kept in XCom."""
