"""Reading and verifying the history kept beside target tables (``docs/history.md``).

:func:`read_changes` returns change-log rows of a table (:mod:`airflow_provider_binlog.contract.history`);
:func:`verify_history` recomputes a change log's digest chain from its data files and reports the first window
whose rows no longer match (``python -m airflow_provider_binlog.admin verify-history``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_binlog.contract.columns import FILE_COLUMN, SEQ_COLUMN, TS_COLUMN, WINDOW_COLUMN
from airflow_provider_binlog.contract.delta import open_table
from airflow_provider_binlog.contract.history import (
    CHAIN_KEY,
    DIGEST_KEY,
    MERGE_WINDOW_COLUMN,
    PREVIOUS_KEY,
    ROWS_KEY,
    STATEMENT_COLUMN,
    STATEMENT_POS_COLUMN,
    chain_digest,
    changelog_uri,
    rows_digest,
)
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for
from airflow_provider_binlog.exceptions import BinlogConfigError

if TYPE_CHECKING:
    from deltalake import DeltaTable

_WINDOW_OF_FILE = re.compile(r"(?:^|/)w(\d+)-s\d+-[^/]*$")
"""A change-log data file's name as the merge writes it: ``w<window>-s<segment>-<part>.parquet``."""


def _changelog(target_path: str, table: str, storage_options: StorageOptions | None) -> DeltaTable:
    uri = changelog_uri(target_path, table)
    found = open_table(uri, storage_options)
    if found is None:
        raise BinlogConfigError(
            f"{table} has no change log at {uri}: give its pipeline history='changelog' (docs/history.md); its "
            "history starts at the next window merged"
        )
    return found


def read_changes(
    target_path: str,
    table: str,
    *,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    key: Mapping[str, Any] | None = None,
    storage_options: StorageOptions | None = None,
) -> pa.Table:
    """Return the change-log rows of ``db.table``, in the order of the changes (order key).

    :param target_path: the pipeline's target root.
    :param table: ``db.table``.
    :param since: keep changes committed at or after this time (timezone-aware; ``_binlog_ts``).
    :param until: keep changes committed before this time.
    :param key: ``{key column: value}``: keep one row's changes (its key before or after the change).
    :param storage_options: storage options of the target store.
    :returns: the change log's columns (:func:`~airflow_provider_binlog.contract.history.changelog_schema`), with
        the statement's text (``_binlog_statement``) on every row of a statement the source logged (the change log
        stores it on the statement's first row).
    :raises BinlogConfigError: if the table has no change log, or a time is naive.
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    for name, moment in (("since", since), ("until", until)):
        if moment is not None and moment.tzinfo is None:
            raise BinlogConfigError(f"{name}={moment!r} has no time zone: pass an aware datetime (UTC)")
    changelog = _changelog(target_path, table, storage_options)
    condition = pc.scalar(True)
    if since is not None:
        condition &= pc.field(TS_COLUMN) >= pc.scalar(since)
    if until is not None:
        condition &= pc.field(TS_COLUMN) < pc.scalar(until)
    for name, value in (key or {}).items():
        condition &= pc.field(name) == pc.scalar(value)
    uris = changelog.file_uris()
    schema = changelog.schema().to_arrow()
    if not uris:
        return pa.schema(schema).empty_table()
    filesystem, _ = filesystem_for(uris[0], storage_options)
    paths = [filesystem_for(u, storage_options)[1] for u in uris]
    dataset = ds.dataset(paths, schema=pa.schema(schema), format="parquet", filesystem=filesystem)
    found = dataset.to_table(filter=condition)
    if STATEMENT_COLUMN in found.column_names and found.num_rows:
        found = _with_statement_text(found, dataset)
    return found.sort_by([(WINDOW_COLUMN, "ascending"), (SEQ_COLUMN, "ascending")])


def _with_statement_text(found: pa.Table, dataset: Any) -> pa.Table:
    """Return ``found`` with the text of its statement on every row (the change log's first row of it holds it)."""
    import pyarrow.compute as pc

    statement = (FILE_COLUMN, STATEMENT_POS_COLUMN)
    wanted = pc.unique(found[STATEMENT_POS_COLUMN].drop_null())  # read only the texts of these statements
    if not len(wanted):
        return found
    texts = dataset.to_table(
        columns=[*statement, STATEMENT_COLUMN],
        filter=pc.field(STATEMENT_COLUMN).is_valid() & pc.field(STATEMENT_POS_COLUMN).isin(wanted),
    )
    texts = texts.group_by(list(statement)).aggregate([(STATEMENT_COLUMN, "max")])
    texts = texts.rename_columns([*statement, STATEMENT_COLUMN])
    rows = found.select(list(statement)).append_column("__row", pa.array(range(found.num_rows), pa.int64()))
    joined = rows.join(texts, list(statement), join_type="left outer").sort_by("__row")
    at = found.schema.get_field_index(STATEMENT_COLUMN)
    return found.set_column(at, found.schema.field(at), joined[STATEMENT_COLUMN].cast(pa.string()))


@dataclass
class HistoryReport:
    """What :func:`verify_history` found.

    :param table: ``db.table``.
    :param windows: digest-bearing commits (windows) checked, in commit order.
    :param rows: change-log rows read.
    :param problems: one message per window (or file) that does not match, first in commit order first.
    :param first_bad_window: the first window whose rows, digest or chain do not match; None when all match.
    """

    table: str
    windows: int = 0
    rows: int = 0
    problems: list[str] = field(default_factory=list)
    first_bad_window: int | None = None

    @property
    def ok(self) -> bool:
        """Return whether every window's rows match their digests and the chain is whole."""
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            return f"{self.table}: the change log's {self.windows} windows ({self.rows} rows) match their digest chain"
        return f"{self.table}: " + "; ".join(self.problems)

    def _bad(self, window: int | None, message: str) -> None:
        self.problems.append(message)
        if window is not None:
            self._bad_windows.add(window)

    _bad_windows: set[int] = field(default_factory=set, repr=False)


def verify_history(
    target_path: str, table: str, *, storage_options: StorageOptions | None = None
) -> HistoryReport:
    """Recompute the digest chain of a table's change log from its data files.

    Each digest-bearing commit (one per window merged) records the digest of the rows it appended and a chain
    value over the previous commit's (:mod:`airflow_provider_binlog.contract.history`). The rows of each window
    are read back (Parquet page checksums verified), their digest compared with the recorded one, and the chain
    recomputed. What this proves and what not: ``docs/history.md``, "Tamper evidence".

    :param target_path: the pipeline's target root.
    :param table: ``db.table``.
    :param storage_options: storage options of the target store.
    :raises BinlogConfigError: if the table has no change log.
    """
    changelog = _changelog(target_path, table, storage_options)
    report = HistoryReport(table)
    records = [c for c in reversed(changelog.history()) if DIGEST_KEY in c]
    files = [_data_file(uri, storage_options) for uri in changelog.file_uris()]
    for broken in (f for f in files if f.error):
        report._bad(broken.named_window, f"data file {broken.uri} cannot be read: {broken.error}")
    chain = ""
    for record in records:
        window = int(record["binlog.window"])
        report.windows += 1
        if record.get(PREVIOUS_KEY) != chain:
            report._bad(
                window, f"window {window}: the chain is broken before it (a commit was removed or reordered)"
            )
        chain = str(record.get(CHAIN_KEY))
        if chain_digest(str(record.get(PREVIOUS_KEY)), window, str(record[DIGEST_KEY])) != chain:
            report._bad(window, f"window {window}: its recorded chain value does not follow from its digest")
        holding = [f for f in files if f.holds(window)]
        if any(f.error for f in holding):
            continue  # reported above
        rows, unreadable = _window_rows([f.uri for f in holding], window, storage_options)
        report.rows += rows.num_rows
        if unreadable:
            report._bad(window, f"window {window}: {unreadable}")
        elif rows_digest(rows) != record[DIGEST_KEY]:
            report._bad(
                window,
                f"window {window}: its {rows.num_rows} rows (recorded: {record.get(ROWS_KEY)}) do not match the "
                "digest recorded when it was merged: the data files were changed",
            )
    windows = [int(r["binlog.window"]) for r in records]
    for stray in (f for f in files if not f.error and not any(f.holds(w) for w in windows)):
        report._bad(
            stray.low,
            f"data file {stray.uri} holds rows of no digest-bearing commit (windows {stray.low}-{stray.high})",
        )
    in_order = [w for w in windows if w in report._bad_windows] + sorted(report._bad_windows - set(windows))
    report.first_bad_window = in_order[0] if in_order else None
    return report


@dataclass(frozen=True)
class _DataFile:
    """A change-log data file and the range of windows its rows belong to (its footer's statistics)."""

    uri: str
    low: int | None = None
    high: int | None = None
    error: str = ""
    named_window: int | None = None
    """The window the merge named the file after (``w<window>-s<segment>-...``), for a file whose footer is unreadable."""

    def holds(self, window: int) -> bool:
        """Return whether rows of ``window`` may be in the file (a file whose footer is unreadable: by its name)."""
        if self.error:
            return self.named_window == window
        return self.low is not None and self.high is not None and self.low <= window <= self.high


def _data_file(uri: str, storage_options: StorageOptions | None) -> _DataFile:
    import pyarrow.parquet as pq

    fs, path = filesystem_for(uri, storage_options)
    named = _WINDOW_OF_FILE.search(path)
    try:
        metadata = pq.read_metadata(path, filesystem=fs)
        names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        index = names.index(MERGE_WINDOW_COLUMN)
        bounds = [metadata.row_group(g).column(index).statistics for g in range(metadata.num_row_groups)]
        if any(b is None or not b.has_min_max for b in bounds):
            raise OSError(f"a row group has no statistics of {MERGE_WINDOW_COLUMN}")
    except (OSError, ValueError, pa.ArrowException) as err:
        return _DataFile(uri, error=str(err), named_window=int(named.group(1)) if named else None)
    if not bounds:
        return _DataFile(uri)
    return _DataFile(uri, min(int(b.min) for b in bounds), max(int(b.max) for b in bounds))


def _window_rows(
    uris: list[str], window: int, storage_options: StorageOptions | None
) -> tuple[pa.Table, str]:
    """Return a window's rows from the files holding them, and why a file could not be read ("" if all could)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    tables = []
    for uri in uris:
        fs, path = filesystem_for(uri, storage_options)
        try:
            with fs.open_input_file(path) as handle:
                rows = pq.ParquetFile(handle, page_checksum_verification=True).read()
        except (OSError, pa.ArrowException) as err:
            return pa.table({}), f"data file {uri} cannot be read: {err}"
        tables.append(rows.filter(pc.equal(rows.column(MERGE_WINDOW_COLUMN), window)))
    if not tables:
        return pa.table({}), ""
    return pa.concat_tables(tables, promote_options="permissive"), ""
