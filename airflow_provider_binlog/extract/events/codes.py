"""Binlog event type codes of both flavors.

MySQL ``libs/mysql/binlog/event/binlog_event.h`` (``Log_event_type``); MariaDB KB, "Replication Protocol",
"Binlog Event Header".
"""

from __future__ import annotations

QUERY = 2
STOP = 3
ROTATE = 4
INTVAR = 5
RAND = 13
USER_VAR = 14
FORMAT_DESCRIPTION = 15
XID = 16
BEGIN_LOAD_QUERY = 17
EXECUTE_LOAD_QUERY = 18
TABLE_MAP = 19
WRITE_ROWS_V1 = 23
UPDATE_ROWS_V1 = 24
DELETE_ROWS_V1 = 25
INCIDENT = 26
HEARTBEAT = 27
IGNORABLE = 28
ROWS_QUERY = 29
WRITE_ROWS = 30
UPDATE_ROWS = 31
DELETE_ROWS = 32
GTID = 33
ANONYMOUS_GTID = 34
PREVIOUS_GTIDS = 35
TRANSACTION_CONTEXT = 36
VIEW_CHANGE = 37
XA_PREPARE = 38
PARTIAL_UPDATE_ROWS = 39
TRANSACTION_PAYLOAD = 40
HEARTBEAT_V2 = 41
GTID_TAGGED = 42
MARIADB_ANNOTATE_ROWS = 160
MARIADB_BINLOG_CHECKPOINT = 161
MARIADB_GTID = 162
MARIADB_GTID_LIST = 163
MARIADB_START_ENCRYPTION = 164
MARIADB_QUERY_COMPRESSED = 165
MARIADB_PARTIAL_ROW_DATA = 172

NAMES = {
    QUERY: "QUERY",
    STOP: "STOP",
    ROTATE: "ROTATE",
    INTVAR: "INTVAR",
    RAND: "RAND",
    USER_VAR: "USER_VAR",
    FORMAT_DESCRIPTION: "FORMAT_DESCRIPTION",
    XID: "XID",
    BEGIN_LOAD_QUERY: "BEGIN_LOAD_QUERY",
    EXECUTE_LOAD_QUERY: "EXECUTE_LOAD_QUERY",
    TABLE_MAP: "TABLE_MAP",
    WRITE_ROWS_V1: "WRITE_ROWS_V1",
    UPDATE_ROWS_V1: "UPDATE_ROWS_V1",
    DELETE_ROWS_V1: "DELETE_ROWS_V1",
    INCIDENT: "INCIDENT",
    HEARTBEAT: "HEARTBEAT",
    IGNORABLE: "IGNORABLE",
    ROWS_QUERY: "ROWS_QUERY",
    WRITE_ROWS: "WRITE_ROWS_V2",
    UPDATE_ROWS: "UPDATE_ROWS_V2",
    DELETE_ROWS: "DELETE_ROWS_V2",
    GTID: "GTID",
    ANONYMOUS_GTID: "ANONYMOUS_GTID",
    PREVIOUS_GTIDS: "PREVIOUS_GTIDS",
    TRANSACTION_CONTEXT: "TRANSACTION_CONTEXT",
    VIEW_CHANGE: "VIEW_CHANGE",
    XA_PREPARE: "XA_PREPARE",
    PARTIAL_UPDATE_ROWS: "PARTIAL_UPDATE_ROWS",
    TRANSACTION_PAYLOAD: "TRANSACTION_PAYLOAD",
    HEARTBEAT_V2: "HEARTBEAT_V2",
    GTID_TAGGED: "GTID_TAGGED",
    MARIADB_ANNOTATE_ROWS: "ANNOTATE_ROWS",
    MARIADB_BINLOG_CHECKPOINT: "BINLOG_CHECKPOINT",
    MARIADB_GTID: "MARIADB_GTID",
    MARIADB_GTID_LIST: "GTID_LIST",
    MARIADB_START_ENCRYPTION: "START_ENCRYPTION",
    **{code: "MARIADB_COMPRESSED" for code in range(MARIADB_QUERY_COMPRESSED, 172)},
    MARIADB_PARTIAL_ROW_DATA: "PARTIAL_ROW_DATA",
}
"""Readable name of each type code (the names the corpus README counts)."""

ROWS_KINDS = {
    WRITE_ROWS_V1: "write",
    WRITE_ROWS: "write",
    UPDATE_ROWS_V1: "update",
    UPDATE_ROWS: "update",
    PARTIAL_UPDATE_ROWS: "update",
    DELETE_ROWS_V1: "delete",
    DELETE_ROWS: "delete",
}
"""Rows event type codes and the change they carry (``write`` / ``update`` / ``delete``)."""

ROWS_V2 = frozenset({WRITE_ROWS, UPDATE_ROWS, DELETE_ROWS, PARTIAL_UPDATE_ROWS})
"""Rows events whose post-header carries the v2 extra-data block."""

REFUSED = {
    **{
        code: "MariaDB compressed event (log_bin_compress=ON): its rows cannot be decoded here and would be lost; "
        "set log_bin_compress=OFF on the source"
        for code in range(MARIADB_QUERY_COMPRESSED, 172)
    },
    MARIADB_START_ENCRYPTION: "an encrypted MariaDB binlog (encrypt_binlog=ON) read as a file; read it over the "
    "replication connection, which the server decrypts",
    MARIADB_PARTIAL_ROW_DATA: "a MariaDB rows event fragmented over several events (binlog_row_event_fragment_"
    "threshold); raise that threshold on the source",
}
"""Event types whose rows cannot be read and must not be skipped: the reason, naming what to do."""
