"""Verifying the lake against the source, chunk by chunk, and repairing what differs (``mysqlcdc verify``)."""
