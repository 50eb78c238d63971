"""Progress lines of a window read: rows, rows/s, binlog coordinates, bytes left and an ETA.

A window that covers a long backlog reads for minutes or hours; between ``extracting window ...`` and
``staged: ...`` the task log shows one line per :data:`PROGRESS_SECONDS`, e.g.::

    window 12: 1,204,332 rows (48,113 rows/s) at mariadb-bin.000042:88123456, 310,442,113 of 812,004,551
    bytes left, ETA 6 min 12 s

Bytes are binlog bytes between the current event and the window end, from the sizes ``SHOW BINARY LOGS``
listed when the window was cut (:func:`~airflow_provider_binlog.monitoring.retention.binlog_bytes_between`); the ETA
assumes the byte rate so far holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.source.server import binlog_bytes_between

log = logging.getLogger(__name__)

PROGRESS_SECONDS = 10.0
"""Seconds between two progress lines of one window read."""


class ExtractProgress:
    """Log a window read's progress at most once per ``period`` seconds.

    :param window: the window's sequence number.
    :param start: the window start.
    :param end: the window end.
    :param binlog_files: ``[(file name, size in bytes)]`` from ``SHOW BINARY LOGS``, oldest first.
    :param period: seconds between two lines (default :data:`PROGRESS_SECONDS`).
    :param clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        window: int,
        start: BinlogPosition,
        end: BinlogPosition,
        binlog_files: Sequence[tuple[str, int]],
        period: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self.end = end
        self.files = list(binlog_files)
        self.total = binlog_bytes_between(self.files, start, end)
        self.period = PROGRESS_SECONDS if period is None else period
        self.clock = clock
        self.started = clock()
        self.next_at = self.started + self.period

    def tick(self, file: str, pos: int, rows: int) -> None:
        """Log a line when ``period`` seconds passed since the last one.

        :param file: the binlog file of the event just read.
        :param pos: the end position of that event (bytes).
        :param rows: row changes read so far.
        """
        now = self.clock()
        if now < self.next_at:
            return
        self.next_at = now + self.period
        log.info(self.line(BinlogPosition(file, pos), rows, now))

    def line(self, at: BinlogPosition, rows: int, now: float) -> str:
        """Return the progress line at ``at`` after ``rows`` row changes, at monotonic time ``now``."""
        elapsed = max(now - self.started, 1e-6)
        left = binlog_bytes_between(self.files, at, self.end)
        done = max(self.total - left, 0)
        eta = "unknown" if done == 0 else _duration(left * elapsed / done)
        return (
            f"window {self.window}: {rows:,} rows ({rows / elapsed:,.0f} rows/s) at {at}, "
            f"{left:,} of {self.total:,} bytes left, ETA {eta}"
        )


def _duration(seconds: float) -> str:
    """Return ``seconds`` as ``1 h 2 min``, ``3 min 4 s`` or ``5 s``."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"
