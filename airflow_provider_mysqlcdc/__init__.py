"""Replicate MySQL tables into a data lake with Spark, orchestrated by Airflow.

Layers (imports point downwards only):
``hooks``/``operators``/``plugins`` (Airflow) -> ``spark`` -> ``engine``.
"""
__version__ = "0.1.0"
