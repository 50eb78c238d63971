"""The errors of the event reader (``extract/events/``) and of the row decoders it uses, without Airflow.

``extract/events/`` imports nothing from Airflow (an import contract says so), so it raises these, not the
provider's Airflow-rooted errors; they live beside the package because the row decoders
(:mod:`~airflow_provider_binlog.extract.decoder`), which the event reader uses, raise them too.

The window reader (:class:`~airflow_provider_binlog.extract.reader.WindowReader`) raises the provider's
:class:`~airflow_provider_binlog.exceptions.UnsupportedEventError` (an ``AirflowFailException``: no retry
helps) for each :class:`UndecodableEventError`, with the same message.
"""

from __future__ import annotations


class EventReaderError(Exception):
    """Base class of the event reader's errors."""


class UndecodableEventError(EventReaderError):
    """The binlog holds an event, or a row image, that the reader cannot decode without loss.

    The message names the event (type, binlog file and offset), the table where one is known, and the
    server setting or statement that produced it where one does (``binlog_row_image=FULL``,
    ``binlog_row_value_options``, ``log_bin_compress``).
    """


class CorruptBinlogError(UndecodableEventError):
    """The bytes are not a well-formed binlog: a size out of bounds, an event cut short, a file that ends early.

    Unlike its base class's other cases (a server setting the reader refuses), no setting produced these: the
    file or the transfer is damaged, or was crafted. The message names the file and offset and what to do
    (copy the file again from the server; read the server's active file up to a position it reported).
    """


class ChecksumMismatchError(CorruptBinlogError):
    """An event's CRC32 does not match its bytes (a corrupt file or a broken transfer)."""
