"""What the window reader says when it refuses one table: the errors that quarantine a table, not the pipeline.

A refusal is a :class:`~airflow_provider_binlog.exceptions.TableRefusalError` naming the table, the column, the
refused event's binlog coordinates and GTID; :func:`~airflow_provider_binlog.extract.window.extract_window`
turns it into a quarantine of that table (``docs/adr/0033-table-quarantine.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_binlog.exceptions import TableRefusalError, UndecodableValueError

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.columns import ValueConversionError

QUARANTINE_REMEDY = (
    "With on_table_error='quarantine' (the default) only this table stops: it is quarantined, the window's "
    "other tables are merged, and once the cause is gone (the value fixed or deleted, the column changed by "
    "DDL, the provider upgraded) the next run re-snapshots the table and it leaves quarantine. "
    'See docs/operating.md, "Quarantined tables", and docs/types.md, "What is refused".'
)
"""What a table refusal's message tells the user (:class:`~airflow_provider_binlog.exceptions.TableRefusalError`)."""


def undecodable_value(
    err: ValueConversionError,
    *,
    pipeline: str,
    window: int,
    file: str | None,
    pos: int | None,
    gtid: str | None,
) -> UndecodableValueError:
    """Return the refusal of a value that cannot be staged exactly, with where it is and what to do.

    :param err: the conversion error (its ``table``, ``column`` and ``cause``; its coordinates win over
        ``file``, ``pos`` and ``gtid``, which are the reader's current ones).
    :param window: the window's sequence number.
    """
    file, pos, gtid = err.file or file, err.pos or pos, err.gtid or gtid
    return UndecodableValueError(
        f"pipeline {pipeline!r}, window {window}: cannot stage a value of column {err.column} "
        f"from the row event ending at {file or '?'}:{pos or '?'} (GTID {gtid or 'unknown'}): "
        f"{type(err.cause).__name__}: {err.cause}. The extractor stages every value exactly or not at all, "
        f"and a retry reads the same bytes and fails the same way. {QUARANTINE_REMEDY}",
        table=err.table,
        column=err.column,
        file=file,
        pos=pos,
        gtid=gtid,
        reason=f"a value of column {err.column} cannot be staged exactly: {type(err.cause).__name__}: {err.cause}",
    )


def unsupported_layout(
    table: str,
    reason: str | None,
    *,
    where: str,
    pipeline: str,
    window: int,
    file: str,
    pos: int,
    gtid: str | None,
) -> TableRefusalError:
    """Return the refusal of a table whose row layout the decoder cannot read (``reason``, e.g. a column type).

    :param where: the refused event, as the event reader describes it (``Event.where``).
    """
    reason = reason or "the row layout cannot be decoded"
    return TableRefusalError(
        f"pipeline {pipeline!r}, window {window}: {where}: {reason}; the extractor's reader decodes every row "
        f"with RowDecoder. {QUARANTINE_REMEDY}",
        table=table,
        file=file,
        pos=pos,
        gtid=gtid,
        reason=reason,
    )
