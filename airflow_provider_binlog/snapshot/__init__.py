"""Consistent, chunked, lock-free snapshots of source tables (initial load and re-snapshot).

The algorithm is the watermark-based one of DBLog (Andreas Andreakis, Ioannis Papapanagiotou, "DBLog: A
Watermark Based Change-Data-Capture Framework", arXiv 2010.12597), adapted to batch windows:

1. When a snapshot starts, the pipeline's ledger takes the source head ``S`` and a sequence number
   ``N`` from the window sequence (:mod:`airflow_provider_binlog.snapshot.ledger`). Every window cut
   afterwards gets a larger number; the windows the pipeline still has to merge start at or before
   ``S`` (a new pipeline starts its first window at ``S``).
2. Each table is split into primary-key ranges (:mod:`~airflow_provider_binlog.snapshot.plan`). Each
   chunk is read by one ``SELECT`` in autocommit, so by one consistent read and without locks (InnoDB,
   "Consistent Nonlocking Reads"); the binlog head read just before it is the chunk's low watermark
   ``L >= S`` (:mod:`~airflow_provider_binlog.snapshot.chunks`). Chunks run as Spark tasks.
3. Chunk rows are staged as ``_binlog_op = 'r'`` with order key ``(N, n)`` and merged like a window,
   except that target rows older than ``N`` whose key no chunk returned become tombstones (a
   re-snapshot also removes rows deleted while the binlog was not followed).

Why the result is exact: rows are logged as full after-images (``binlog_row_image=FULL`` is
required), so the target row of a key is the image of the newest change that outranks the rest. Any
change logged after a chunk's watermark ``L`` is in a window numbered above ``N`` and outranks the
chunk's row; if the key changed after ``L`` that newest change is the current row, and if it did not,
the chunk's row (read after ``L``) is. Changes before ``L`` may rank either way: one that outranks the
chunk row is an older full image of the same key, and every later change of that key is also in a
window above ``N``. Windows numbered below ``N`` end at or before ``S`` (the head only moves forward),
so the snapshot rightly outranks them whatever order they are merged in.
"""
