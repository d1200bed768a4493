"""Garbage collection of an output root: what no reader needs any more, deleted after a retention.

``retention`` (the setting and the minimum grace), one module per kind of garbage (``snapshot_garbage``,
``changelog_garbage``, ``delta_garbage``), ``files`` (listing and deleting), ``collector`` (one run over every
table, and the stream's periodic run), ``report`` (``_mysqlcdc_gc.json``: what each run reclaimed).
"""
