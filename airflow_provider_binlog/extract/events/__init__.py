"""Our own binlog event reader: raw events from binlog files or the replication socket, decoded here.

:mod:`.feeds` yields raw events, :class:`.stream.EventReader` decodes them (headers, checksums, table maps,
GTIDs of both flavors, compressed transactions); rows are decoded by
:class:`~airflow_provider_binlog.extract.decoder.RowDecoder`. See ``docs/adr/0018-own-event-reader.md``.
"""
