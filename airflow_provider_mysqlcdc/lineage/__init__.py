"""OpenLineage for the plan, snapshot and stream operators, and for ``mysqlcdc://`` assets.

Data platforms watch lineage through OpenLineage, which Airflow's ``apache-airflow-providers-openlineage``
emits for every task; an operator adds its datasets through ``get_openlineage_facets_on_start`` /
``_on_complete`` / ``_on_failure``. Everything here is imported lazily from those methods (the modules that
import ``openlineage`` only from there), so without the provider nothing of it is loaded or run.
"""
