"""The Spark layer: PySpark data sources and sinks that call the engine."""
