"""Errors raised by the provider, rooted at :class:`AirflowException`.

Errors a retry cannot fix (bad configuration, purged binlogs, corrupt state) derive from
:class:`AirflowFailException` so Airflow fails the task without burning its retries.
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException


class BinlogError(AirflowException):
    """Base class of every error this provider raises."""


class BinlogConfigError(BinlogError, AirflowFailException):
    """The source server, the connection or an argument is configured wrongly; fix it, then retry."""


class SourcePrivilegeError(BinlogConfigError):
    """The pipeline's user lacks a privilege on the source; the message holds the GRANT that fixes it."""


class SourceUnreachableError(BinlogError):
    """The source server cannot be reached or refused the login (retryable unless credentials are wrong)."""


class ReplicationConnectionLostError(SourceUnreachableError):
    """The replication connection broke while a window was read (retryable: the retry re-reads the window)."""


class IntervalOpenError(BinlogError):
    """The run's data interval has not closed long enough ago to cut its window (retryable)."""


class BinlogPurgedError(BinlogError, AirflowFailException):
    """Binlogs the pipeline still needs were purged from the source; a snapshot is needed."""


RESNAPSHOT_REMEDY = (
    "The changes in between are gone: re-snapshot every table of the pipeline, which also moves its "
    'checkpoint past the gap (trigger binlog_resnapshot with {"mode": "purged", "tables": "<the '
    'pipeline\'s tables>"}, or BinlogSnapshotOperator(mode="purged")), and raise the source\'s binlog '
    "retention (binlog_expire_logs_seconds) to at least twice the longest expected outage."
)
"""What a :class:`BinlogPurgedError` message tells the user to do."""


class LostTransactionsError(BinlogError, AirflowFailException):
    """Transactions the pipeline has read (by GTID) are not in the source's binlog: a failover lost them.

    :ivar missing: the GTID set the source lacks (text of the flavor's form).
    """

    def __init__(self, message: str, missing: str) -> None:
        super().__init__(message)
        self.missing = missing


class UnsupportedEventError(BinlogError, AirflowFailException):
    """The binlog holds an event the extractor cannot decode without losing rows."""


class TableRefusalError(UnsupportedEventError):
    """An event of one table cannot be staged exactly: that table, and only it, can be quarantined.

    Raised by the window reader; the extract quarantines the table (``on_table_error="quarantine"``,
    ``docs/operating.md``, "Quarantined tables") or fails the window with it (``"fail"``). The attributes
    default to None so the error survives pickling between a parallel read's processes (``args`` is the
    message alone; the attributes travel in ``__dict__``).

    :ivar table: ``db.table``.
    :ivar column: the column and its type (``db.table.column (type ...)``), when one value is refused.
    :ivar file: binlog file of the refused row event.
    :ivar pos: end position of the refused row event in ``file``.
    :ivar gtid: GTID of its transaction, when the source logs GTIDs.
    :ivar reason: what was refused, in a few words (the message says it all, with the remedy).
    :ivar also: other ``db.table`` names the same event refuses (a statement-based write to several tables).
    """

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        column: str | None = None,
        file: str | None = None,
        pos: int | None = None,
        gtid: str | None = None,
        reason: str | None = None,
        also: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.table, self.column, self.file, self.pos, self.gtid = table, column, file, pos, gtid
        self.reason, self.also = reason, also


class UndecodableValueError(TableRefusalError):
    """A column value in the binlog cannot be converted to its staged type exactly.

    Raised at once, without retries: the same bytes fail the same way on every attempt. The message
    names the pipeline, ``db.table.column``, the column's MySQL type and metadata, the event's binlog
    coordinates and GTID, and what to do.
    """


class StateError(BinlogError, AirflowFailException):
    """The pipeline state Variable is corrupt, hand-edited or belongs to another server."""


class StateConflictError(BinlogError, AirflowFailException):
    """Another run changed the pipeline state between our read and our write (lost compare-and-set)."""


class StateLockTimeoutError(BinlogError):
    """Another session held the pipeline's state lock on the source for the whole wait (retryable)."""


class PipelineBusyError(StateError):
    """Another run holds the pipeline: its window is cut or staged but not merged yet."""


class StagingError(BinlogError, AirflowFailException):
    """The staging location cannot be written, or a staged window is incomplete or inconsistent."""


class MergeError(BinlogError):
    """The merge of a window into the target failed; the checkpoint did not move."""


class PurgeRiskError(BinlogError, AirflowFailException):
    """Binlogs the pipeline still needs may be purged before it reads them (headroom below the minimum)."""


class ValidationMismatchError(BinlogError, AirflowFailException):
    """The target differs from the source at the checkpoint, confirmed after the target caught up."""


class QuarantinedTableError(BinlogError, AirflowFailException):
    """A target table read with ``allow_quarantined=False`` is quarantined (its rows are not current)."""


class QuarantinedTableWarning(UserWarning):
    """A target table that was read is quarantined: its rows are the source's as of where it stopped."""


class TablesQuarantinedError(BinlogError, AirflowFailException):
    """Tables of the pipeline are quarantined: the run's other tables were merged, these stand still."""


class PipelineNameError(BinlogConfigError, ValueError):
    """A pipeline name is not 1-200 letters, digits, ``_`` or ``-``; nothing was created for it."""
