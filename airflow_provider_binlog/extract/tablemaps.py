"""Character sets of table-map columns: collation ids to charset names, ENUM/SET member names decoded.

Used by our TABLE_MAP parser (:mod:`~airflow_provider_binlog.extract.events.tablemap`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymysqlreplication.constants import CHARSET, FIELD_TYPE

from airflow_provider_binlog.extract.charsets import text_decoder

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.events.tablemap import Column

UCA1400_CHARSETS = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32")
"""Character sets of MariaDB 10.10+'s UCA 14.0.0 collations, whose ids are ``2048 + 256 * index + n``
(MariaDB ``strings/ctype-uca1400.h``; ``utf8mb3_uca1400_ai_ci`` is 2048, ``utf8mb4_...`` 2304, ``ucs2_...``
2560, ``utf16_...`` 2816, ``utf32_...`` 3072); mysql-replication does not know them."""


def collation_charset(collation_id: int, dbms: str) -> str:
    """Return the character set name of a collation id of a table map, or ``collation <id>`` when unknown.

    :param collation_id: the collation id (MySQL internals, "TABLE_MAP_EVENT" optional metadata
        ``DEFAULT_CHARSET`` / ``COLUMN_CHARSET``).
    :param dbms: ``mysql`` or ``mariadb`` (their ids above 245 differ).
    """
    if 2048 <= collation_id < 2048 + 256 * len(UCA1400_CHARSETS):
        return UCA1400_CHARSETS[(collation_id - 2048) // 256]
    charset = CHARSET.charset_by_id(collation_id, dbms)
    return str(charset.name) if charset is not None else f"collation {collation_id}"


def redecode_members(column: Column) -> None:
    """Decode an ENUM/SET column's member names in the column's character set, or record why not.

    The table map holds the names in the column's character set; the TABLE_MAP parser reads
    them as UTF-8 with ``surrogateescape``, which gives their bytes back exactly, and they are decoded
    here with the server's table (:func:`~airflow_provider_binlog.extract.charsets.text_decoder`). When
    that fails, ``members_problem`` says why and the column is refused.
    """
    charset = getattr(column, "mysql_charset", None)
    if not isinstance(charset, str) or charset == "binary":
        return
    is_enum = column.type == FIELD_TYPE.ENUM
    members = list((column.enum_values if is_enum else column.set_values) or [])
    names = members[1:] if is_enum else members  # the library puts '' (index 0, the error value) first
    try:
        decode = text_decoder(charset)
        decoded = [decode(name.encode("utf-8", "surrogateescape")) for name in names]
    except ValueError as err:
        column.members_problem = f"ENUM/SET member names cannot be decoded exactly: {err}"
        return
    if is_enum:
        column.enum_values = ["", *decoded]
    else:
        column.set_values = decoded
