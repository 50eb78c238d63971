"""Turn raw binlog events (from a file or the replication socket) into decoded events.

:class:`EventReader` keeps what the events before decide: the FORMAT_DESCRIPTION (checksum algorithm,
post-header lengths, flavor) and the table maps by table id. It verifies each event's CRC32
(``zlib.crc32`` over the event without its last 4 bytes), dispatches on the type code to the parsers of
:mod:`.parsers` and :mod:`.tablemap`, inflates TRANSACTION_PAYLOAD events (zstd) and yields their inner
events after them, and leaves row images undecoded until :meth:`RowsEvent.rows` is called, so rows of
tables nobody reads cost nothing. Row images are decoded by
:class:`~airflow_provider_binlog.extract.decoder.RowDecoder`, one per table layout.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.extract.decoder import RowDecoder, layout_key, unsupported_reason
from airflow_provider_binlog.extract.errors import (
    CorruptBinlogError,
    EventReaderError,
    UndecodableEventError,
)
from airflow_provider_binlog.extract.events import codes, parsers
from airflow_provider_binlog.extract.events.feeds import Event
from airflow_provider_binlog.extract.events.integrity import (
    CRC32_RESIDUE,
    MAX_EVENT_SIZE,
    format_checksum,
    verify,
)
from airflow_provider_binlog.extract.events.integrity import where as _where
from airflow_provider_binlog.extract.events.parsers import HEADER, HEADER_SIZE, FormatDescription
from airflow_provider_binlog.extract.events.tablemap import TableMap, TableMapParser
from airflow_provider_binlog.extract.wire import packed_integer

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.events.tablemap import Column

_FORMAT_DESCRIPTION = codes.FORMAT_DESCRIPTION
_TABLE_MAP = codes.TABLE_MAP
_ROWS_SHORT = struct.Struct("<IHH")
_ROWS_LONG = struct.Struct("<IHHH")
"""A rows event's post-header: table id (4 bytes, or 6), flags, then (v2) the extra data's length."""
Origin = tuple[int, str, int, bool]
"""Where a rows event is, for error messages: ``(type code, file, start, in a TRANSACTION_PAYLOAD)``."""
MALFORMED = (IndexError, KeyError, struct.error, ValueError, ArithmeticError, RecursionError)
"""What parsing bytes that do not hold what their type says raises (``UnicodeDecodeError`` is a ``ValueError``,
``OverflowError`` an ``ArithmeticError``): turned into :class:`UndecodableEventError` naming the event."""
_INFLATE_STEP = 16 << 20
"""Bytes inflated at a time past the first step: a payload's allocation follows what it really inflates to."""


class RowsEvent:
    """A WRITE/UPDATE/DELETE rows event (v1 or v2, and MySQL's PARTIAL_UPDATE_ROWS) with its table map.

    Its column count and bitmaps are read when asked for: a full image's (the extractor's case) is checked by
    one comparison with the decoder's :attr:`~.decoder.RowDecoder.rows_head` and the images are decoded in
    place, without reading them apart or slicing the images out of the body (about 0.1 s of a 3 s extract of
    240,000 one-row OLTP events).

    :param kind: ``write``, ``update`` or ``delete``.
    :param table_map: the TABLE_MAP the event's table id names.
    :param flags: rows event flags (bit 0: end of statement).
    :param body: the event's body (post-header to the row images' end). :param head_at: where its column
        count starts (the column count, the columns-present bitmap, a second one for updates, the images).
    :param partial: a PARTIAL_UPDATE_ROWS event.
    :param origin: ``(type code, file, start, in a payload)`` of the event, for error messages (:attr:`where`).
    """

    __slots__ = ("kind", "table_map", "flags", "partial", "_body", "_head_at", "_head", "_origin", "_reader")

    def __init__(
        self,
        kind: str,
        table_map: TableMap,
        flags: int,
        body: bytes,
        head_at: int,
        partial: bool,
        origin: Origin,
        reader: EventReader,
    ) -> None:
        self.kind = kind
        self.table_map = table_map
        self.flags = flags
        self.partial = partial
        self._body = body
        self._head_at = head_at
        self._head: tuple[int, bytes, bytes | None, int] | None = None
        self._origin = origin
        self._reader = reader

    def _parsed_head(self) -> tuple[int, bytes, bytes | None, int]:
        """Return ``(column count, columns-present bitmap, after image's bitmap or None, images' start)``."""
        if self._head is None:
            body, pos = self._body, self._head_at
            try:
                count = body[pos]
                if (
                    count < 251
                ):  # a one-byte length-encoded integer, as in any table of fewer than 251 columns
                    pos += 1
                else:
                    count, pos = packed_integer(body, pos)
            except (*MALFORMED, EventReaderError) as err:
                raise _unparsable(err, _where(*self._origin)) from err
            size = (count + 7) // 8
            present, pos = body[pos : pos + size], pos + size
            present_after = None
            if self.kind == "update":
                present_after, pos = body[pos : pos + size], pos + size
            self._head = (count, present, present_after, pos)
        return self._head

    @property
    def number_of_columns(self) -> int:
        """Return the count of columns in the images."""
        return self._parsed_head()[0]

    @property
    def columns_present_bitmap(self) -> bytes:
        """Return the columns-present bitmap of the (before) image."""
        return self._parsed_head()[1]

    @property
    def columns_present_bitmap2(self) -> bytes | None:
        """Return the columns-present bitmap of the after image (updates only)."""
        return self._parsed_head()[2]

    @property
    def body(self) -> bytes:
        """Return the row images."""
        return self._body[self._parsed_head()[3] :]

    @property
    def where(self) -> str:
        """Return the event and its table, for error messages."""
        return f"{_where(*self._origin)} on {self.table_map.name}"

    @property
    def schema(self) -> str:
        """Return the table's database."""
        return self.table_map.schema

    @property
    def table(self) -> str:
        """Return the table's name."""
        return self.table_map.table

    def present_columns(self) -> list[Column]:
        """Return the table map's columns present in the (before) image, in column order."""
        present = int.from_bytes(self.columns_present_bitmap, "little")
        return [c for i, c in enumerate(self.table_map.columns) if present >> i & 1]

    def image_rows(self) -> list[list[Any]]:
        """Return the rows of a WRITE/DELETE event whose images may lack columns.

        Images of ``binlog_row_image`` MINIMAL or NOBLOB: lists of the values of :meth:`present_columns`.

        The extractor needs full images (:meth:`rows`); this is for reading binlogs written otherwise.

        :raises UndecodableEventError: for an UPDATE event (its two images hold different columns), or
            when the present columns cannot be decoded.
        """
        if self.kind == "update":
            raise UndecodableEventError(f"{self.where}: image_rows() reads WRITE/DELETE events only")
        columns = self.present_columns()
        reason = unsupported_reason(columns)
        if reason:
            raise UndecodableEventError(f"{self.where}: {self.table_map.name} {reason}")
        return RowDecoder(columns).decode_rows_bytes(self.body, self)

    def rows(self) -> list[Any]:
        """Return the rows as staged values in column order.

        Lists of values (``write``/``delete``), or ``(before, after)`` pairs of them (``update``).

        :raises UndecodableEventError: when an image lacks columns (``binlog_row_image`` is not FULL), the
            layout has a column :class:`RowDecoder` cannot decode, the rows do not match the table map, or
            the event carries JSON diffs (``binlog_row_value_options=PARTIAL_JSON``).
        """
        return self.rows_with(self.table_map.decoder or self._reader.decoder(self.table_map, self.where))

    @property
    def columns(self) -> list[Column]:
        """Return the table map's columns."""
        return self.table_map.columns

    def rows_with(self, decoder: RowDecoder) -> list[Any]:
        """Return :meth:`rows` decoded by ``decoder`` (a decoder of this table map's layout).

        :raises UndecodableEventError: as :meth:`rows`.
        """
        body, update = self._body, self.kind == "update"
        head = decoder.update_head if update else decoder.rows_head
        start = self._head_at + len(head)
        if self.partial or body[self._head_at : start] != head:  # not full images of this layout's columns
            start = self._checked_start(decoder)
        if not update:
            return decoder.decode_rows_bytes(body, self, start)
        return decoder.decode_updates_bytes(body, partial=self.partial, event=self, start=start)

    def _checked_start(self, decoder: RowDecoder) -> int:
        """Return where the images start, once the column count and bitmaps are checked against ``decoder``.

        :raises UndecodableEventError: as :meth:`rows`.
        """
        count, present, present_after, start = self._parsed_head()
        if count != len(decoder.columns) or present != decoder.full_bitmap:
            if self.partial:  # MySQL writes these with binlog_row_value_options=PARTIAL_JSON only
                raise UndecodableEventError(
                    f"{self.where}: a PARTIAL_UPDATE_ROWS event with partial row images: JSON diffs are not "
                    f"applied; set binlog_row_value_options='' and binlog_row_image=FULL on the source"
                )
            decoder.check_image(count, present, self.where)
        if self.kind == "update" and not self.partial and present_after != decoder.full_bitmap:
            decoder.check_image(count, present_after or b"", self.where)
        return start


class EventReader:
    """Decode a sequence of raw events of one server (one binlog file chain, or one replication stream).

    Each event's CRC32 is checked when the FORMAT_DESCRIPTION says the server writes them (the checksum is
    also what tells where an event's body ends, so it is never skipped).
    """

    def __init__(self, *, max_event_size: int = MAX_EVENT_SIZE) -> None:
        """Start with no FORMAT_DESCRIPTION and no table maps.

        :param max_event_size: the largest inflated TRANSACTION_PAYLOAD accepted, in bytes
            (:data:`.integrity.MAX_EVENT_SIZE`; the feeds bound the events themselves).
        """
        self.format: FormatDescription | None = None
        self.table_maps: dict[int, TableMap] = {}
        self.max_event_size = max_event_size
        self._parser: TableMapParser | None = None
        self._decoders: dict[tuple[Any, ...], RowDecoder] = {}
        self._rows_shapes: dict[int, tuple[int, int, bool]] = {}
        """Per rows event type: post-header length, table id width, v2 (from the FORMAT_DESCRIPTION)."""
        self._checksum = 0
        """The size of the checksum of the events after the FORMAT_DESCRIPTION read (0 before one)."""

    @property
    def flavor(self) -> str:
        """Return ``mysql`` or ``mariadb``, from the FORMAT_DESCRIPTION read (``mysql`` before one)."""
        return self.format.flavor if self.format else "mysql"

    def events(self, raw_events: Iterable[Event]) -> Iterator[Event]:
        """Decode the events a feed yields (:mod:`.feeds`), then the inner events of each TRANSACTION_PAYLOAD.

        Each event is yielded as it came, its ``data`` replaced by the parsed body. Each is verified before
        it is parsed: its CRC32 when the last FORMAT_DESCRIPTION says the server writes them, and a
        FORMAT_DESCRIPTION always (:func:`.integrity.format_checksum`: the checksum algorithm is taken only
        from a verified event).

        :raises ChecksumMismatchError: when an event's CRC32 is wrong.
        :raises CorruptBinlogError: for a FORMAT_DESCRIPTION whose checksum algorithm is neither OFF nor
            CRC32, and a TRANSACTION_PAYLOAD whose inner events do not fit it or that inflates to more than
            its header says or than ``max_event_size``.
        :raises UndecodableEventError: for events that cannot be skipped and are not read (:data:`.codes.REFUSED`),
            rows events of an unknown table id, and malformed events.
        """
        crc32, body_of, rows_of = zlib.crc32, self._body, self._rows
        rows_kinds, table_maps = codes.ROWS_KINDS, self.table_maps
        table_map_of = self._parser.parse if self.format is not None and self._parser is not None else None
        checksum = self._checksum
        for event in raw_events:
            data, type_code = event.data, event.type_code
            if type_code == _FORMAT_DESCRIPTION:
                self._format_description(data, event)
                checksum = self._checksum
                table_map_of = self._parser.parse if self._parser is not None else None
                event.data = self.format
                yield event
                continue
            if checksum and crc32(data) != CRC32_RESIDUE:
                verify(data, event.file, event.start)  # raises, with the message
            body = data[HEADER_SIZE : len(data) - checksum]
            # Table maps and rows events (4 in 5 OLTP events) skip _body's checks and its type tests: once a
            # FORMAT_DESCRIPTION was read, neither type is refused.
            kind = rows_kinds.get(type_code)
            if table_map_of is None or (kind is None and type_code != _TABLE_MAP):
                event.data = body_of(type_code, body, event.server_id, event, False)
            else:
                try:
                    if kind is None:
                        event.data = table_map = table_map_of(body)
                        table_maps[table_map.table_id] = table_map
                    else:
                        event.data = rows_of(
                            type_code, kind, body, (type_code, event.file, event.start, False)
                        )
                except (*MALFORMED, EventReaderError) as err:
                    raise _unparsable(err, _where(type_code, event.file, event.start, False)) from err
            yield event
            if type_code == codes.TRANSACTION_PAYLOAD:
                yield from self._payload_events(event.data, event)

    def _format_description(self, data: bytes, event: Event) -> None:
        """Read a FORMAT_DESCRIPTION's bytes ``data`` (of ``event``), once verified: checksum, post-header lengths.

        :raises ChecksumMismatchError, CorruptBinlogError: as :func:`.integrity.format_checksum`.
        :raises UndecodableEventError: for a binlog version other than 4.
        """
        checksum = format_checksum(data, event.file, event.start)
        where = _where(codes.FORMAT_DESCRIPTION, event.file, event.start, False)
        try:
            description = parsers.parse_format_description(data[HEADER_SIZE:])
        except (*MALFORMED, EventReaderError) as err:
            raise _unparsable(err, where) from err
        self.format = description
        self._checksum = checksum
        self._rows_shapes = {}
        table_id_size = 4 if description.post_header_length(codes.TABLE_MAP) == 6 else 6
        if self._parser is None or self._parser.flavor != description.flavor:
            self._parser = TableMapParser(description.flavor, table_id_size)

    def _payload_events(self, payload: parsers.TransactionPayload, outer: Event) -> Iterator[Event]:
        """Yield the events inside a TRANSACTION_PAYLOAD: inflated, then back to back, without checksums.

        :raises CorruptBinlogError: when an inner event's header is cut short or its size is less than the
            header or more than the bytes left, or the payload holds another TRANSACTION_PAYLOAD (MySQL
            ``Transaction_payload_event``: a payload holds one transaction's events, never a payload).
        """
        inner = _inflate(payload, outer, self.max_event_size)
        pos, end = 0, len(inner)
        while pos < end:
            if end - pos < HEADER_SIZE:
                raise CorruptBinlogError(
                    f"{_where(codes.TRANSACTION_PAYLOAD, outer.file, outer.start, False)}: its events end with "
                    f"{end - pos} bytes at offset {pos} of {end} inflated bytes, too few for an event header; the "
                    f"binlog bytes are corrupt"
                )
            timestamp, type_code, server_id, size, _, flags = HEADER.unpack_from(inner, pos)
            if not HEADER_SIZE <= size <= end - pos or type_code == codes.TRANSACTION_PAYLOAD:
                raise CorruptBinlogError(
                    f"{_where(type_code, outer.file, outer.start, True)}: an inner event of {size} bytes at "
                    f"offset {pos} of {end} inflated bytes does not fit the payload; the binlog bytes are corrupt"
                )
            parsed = self._body(type_code, inner[pos + HEADER_SIZE : pos + size], server_id, outer, True)
            yield Event(
                type_code, timestamp, server_id, outer.end_pos, flags, outer.file, outer.start, True, parsed
            )
            pos += size

    def _body(self, type_code: int, body: bytes, server_id: int, at: Event, in_payload: bool) -> Any:
        """Return the parsed body of an event of ``type_code`` (None for types the extractor ignores).

        :param at: the event, or the TRANSACTION_PAYLOAD holding it (``in_payload``): where errors say it is.
        """
        if self.format is None or type_code in codes.REFUSED:
            where = _where(type_code, at.file, at.start, in_payload)
            if self.format is None:
                raise UndecodableEventError(
                    f"{where}: no FORMAT_DESCRIPTION event before it; read from the file's start"
                )
            raise UndecodableEventError(f"{where}: {codes.REFUSED[type_code]}")
        try:
            kind = codes.ROWS_KINDS.get(type_code)
            if kind is not None:
                return self._rows(type_code, kind, body, (type_code, at.file, at.start, in_payload))
            return self._parse(type_code, body, server_id)
        except (*MALFORMED, EventReaderError) as err:
            raise _unparsable(err, _where(type_code, at.file, at.start, in_payload)) from err

    def _parse(self, type_code: int, body: bytes, server_id: int) -> Any:
        assert self.format is not None
        assert self._parser is not None
        if type_code == codes.TABLE_MAP:
            table_map = self._parser.parse(body)
            self.table_maps[table_map.table_id] = table_map
            return table_map
        if type_code == codes.MARIADB_ANNOTATE_ROWS:  # one per rows event in a MariaDB binlog
            return parsers.RowsQuery(body, True)
        if type_code == codes.ROWS_QUERY:
            return parsers.RowsQuery(body, False)
        if type_code == codes.MARIADB_GTID:
            return parsers.parse_mariadb_gtid(body, server_id)
        if type_code == codes.XID:
            return parsers.Xid(struct.unpack_from("<Q", body)[0])
        if type_code in (codes.QUERY, codes.EXECUTE_LOAD_QUERY):  # the same layout up to a longer post-header
            return parsers.parse_query(body, self.format.post_header_length(type_code))
        if type_code in (codes.GTID, codes.ANONYMOUS_GTID):
            return parsers.parse_gtid(body, anonymous=type_code == codes.ANONYMOUS_GTID)
        if type_code == codes.GTID_TAGGED:
            return parsers.parse_gtid_tagged(body)
        if type_code == codes.ROTATE:
            return parsers.parse_rotate(body)
        if type_code == codes.PREVIOUS_GTIDS:
            return parsers.parse_previous_gtids(body)
        if type_code == codes.MARIADB_GTID_LIST:
            return parsers.parse_gtid_list(body)
        if type_code == codes.TRANSACTION_PAYLOAD:
            return parsers.parse_transaction_payload(body)
        if type_code == codes.XA_PREPARE:
            return parsers.parse_xa_prepare(body)
        return None

    def _rows(self, type_code: int, kind: str, body: bytes, origin: Origin) -> RowsEvent:
        """Parse a rows event's post-header; its column count, bitmaps and row images stay bytes.

        Post-header: table id (6 bytes, 4 for a 6-byte post-header), flags (2); v2 events then hold the
        length of their extra data (2 bytes, counting itself) and the extra data. Body: column count
        (packed), the columns-present bitmap, a second one for updates, then the row images.
        """
        shape = self._rows_shapes.get(type_code)
        if shape is None:
            assert self.format is not None
            post = self.format.post_header_length(type_code) or (10 if type_code in codes.ROWS_V2 else 8)
            shape = self._rows_shapes[type_code] = (post, post == 6, type_code in codes.ROWS_V2)
        post, short_id, v2 = shape
        # One struct call for the table id (4 bytes, or 6 read as 4 + 2), the flags and v2's extra-data length.
        if short_id:
            table_id, flags, extra = _ROWS_SHORT.unpack_from(body)
            pos = 6 + extra if v2 else post
        else:
            low, high, flags, extra = _ROWS_LONG.unpack_from(body)
            table_id = low | high << 32
            pos = 8 + extra if v2 else post
        table_map = self.table_maps.get(table_id)
        if table_map is None:
            raise UndecodableEventError(
                f"{_where(*origin)}: its table id {table_id} has no TABLE_MAP event before it; read from a "
                f"transaction start"
            )
        partial = type_code == codes.PARTIAL_UPDATE_ROWS
        return RowsEvent(kind, table_map, flags, body, pos, partial, origin, self)

    def decoder(self, table_map: TableMap, where: str) -> RowDecoder:
        """Return the row decoder of a table map's layout (built once per layout).

        :raises UndecodableEventError: naming the column when the layout has one it cannot decode.
        """
        if table_map.decoder is not None:
            return table_map.decoder  # type: ignore[no-any-return]
        reason = unsupported_reason(table_map.columns)
        if reason:
            raise UndecodableEventError(f"{where}: {table_map.name} {reason}")
        key = layout_key(table_map.columns)
        decoder = self._decoders.get(key)
        if decoder is None:
            decoder = self._decoders[key] = RowDecoder(table_map.columns)
        table_map.decoder = decoder
        return decoder


def _unparsable(err: BaseException, where: str) -> UndecodableEventError:
    """Return the error to raise for ``err``, raised while parsing the event ``where`` names.

    A reader error keeps its class and gains ``where`` when its message lacks it; anything else (what
    :data:`MALFORMED` lists) becomes an :class:`UndecodableEventError`.
    """
    if isinstance(err, UndecodableEventError):
        return err if where in str(err) else type(err)(f"{where}: {err}")
    return UndecodableEventError(
        f"{where}: the event cannot be parsed ({type(err).__name__}: {err}); the binlog bytes are corrupt, or "
        f"the server wrote a layout this reader does not know"
    )


def _inflate(payload: parsers.TransactionPayload, raw: Event, max_size: int) -> bytes:
    """Return the payload's events, decompressed with ``zstandard`` when compressed.

    The payload's header states its inflated size (MySQL ``Transaction_payload_event``,
    ``UNCOMPRESSED_SIZE``): no more than that, nor than ``max_size``, is ever inflated or allocated; at most
    :data:`_INFLATE_STEP` bytes are allocated ahead of what the data really inflates to.

    :raises CorruptBinlogError: when the header states more than ``max_size`` bytes, the payload does not
        inflate, or inflates to another size than its header states (or, without one, to more than
        ``max_size``).
    """
    at = _where(codes.TRANSACTION_PAYLOAD, raw.file, raw.start, False)
    stated = payload.uncompressed_size
    if stated > max_size:
        raise CorruptBinlogError(
            f"{at}: its header says it inflates to {stated} bytes, more than the {max_size} the reader accepts "
            f"(max_event_size): the bytes are corrupt, or raise max_event_size if the server wrote it"
        )
    limit = stated or max_size
    if payload.compression == "none":
        inner = payload.payload
    else:
        inner = _zstd_inflate(payload.payload, limit, at)
    if len(inner) > limit or stated and len(inner) != stated:
        said = f"its header says {stated}" if stated else f"the reader accepts {max_size} (max_event_size)"
        raise CorruptBinlogError(
            f"{at}: inflates to {'more than ' if len(inner) > limit else ''}{len(inner)} bytes, {said}; the "
            f"binlog bytes are corrupt"
        )
    return inner


def _zstd_inflate(data: bytes, limit: int, at: str) -> bytes:
    """Return the zstd frames ``data`` inflated, up to ``limit`` + 1 bytes (one more tells it inflates to more).

    :raises CorruptBinlogError: when the bytes are not zstd frames.
    """
    import zstandard

    chunks: list[bytes] = []
    wanted = limit + 1
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
        while wanted > 0:
            chunk = reader.read(min(wanted, _INFLATE_STEP))
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
    except zstandard.ZstdError as err:
        raise CorruptBinlogError(f"{at}: does not inflate ({err}); the binlog bytes are corrupt") from err
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
