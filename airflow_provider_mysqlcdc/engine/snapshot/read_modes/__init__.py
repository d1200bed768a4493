"""The ways of reading one chunk, a file each, all behind ``ChunkRead`` (``chunk_reader.py``), which picks one
by the source's read view mode (``read_view.resolve_mode``) and the reader (``native_read/choice.py``), and
gives them what they share: the session, the SELECT, the columns' checks, the binlog window and the buffers.
Each has ``batches(...)``: the chunk's snapshot batches at its HW, its watermarks in ``read.result``.

| file | mode | server | writes to the source |
|---|---|---|---|
| ``consistent_snapshot.py`` | ``consistent_snapshot``, pure-Python reader | MariaDB, Percona | no |
| ``consistent_snapshot_native.py`` | ``consistent_snapshot``, native reader | MariaDB | no |
| ``gtid_executed.py`` | ``gtid_executed``, both readers | Oracle MySQL, ``gtid_mode=ON`` | no |
| ``watermark_table.py`` | ``watermark_table``, both readers | any | two marker rows a chunk |
"""
