"""The source connection's extras: one pydantic model that validates them and yields the connection form.

:class:`SourceExtras` is the single definition of every extra: its type, limits, default, label and
description. The hook validates a connection's extras with it (:func:`parse_extras`), and the
``mysqlbinlog`` connection form (``conn-fields`` in the provider info, a JSON schema per field) is built
from it (:func:`conn_fields`), so the limits are written once.

Imports pydantic and nothing from Airflow (the provider info reads it while Airflow discovers providers).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SERVER_ID_MIN = 1
SERVER_ID_MAX = 0xFFFFFFFF
"""A replica ``server_id`` is an unsigned 32-bit integer, 0 excluded (MySQL manual, "Replication and
Binary Logging Options and Variables": ``server_id``)."""

SERVER_ID_BASE = 1 << 30
SERVER_ID_SPAN = (1 << 30) - 1
"""Derived server ids fall in ``[SERVER_ID_BASE, SERVER_ID_BASE + SERVER_ID_SPAN)``, i.e. 2^30 .. 2^31 - 2,
above the small ids DBAs usually give real servers."""

CONNECT_TIMEOUT_MAX_SECONDS = 31_536_000
"""pymysql accepts ``connect_timeout`` in ``(0, 31536000]`` seconds (the provider uses the same bound for
``read_timeout``)."""
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10
"""Seconds the TCP connect and, separately, the login may take (pymysql's own default for the connect)."""
DEFAULT_READ_TIMEOUT_SECONDS = 60
"""Seconds a read or write of an SQL connection may wait after the login (the replication stream's reads
are bounded by :data:`STREAM_TIMEOUT_HEARTBEATS` heartbeat periods instead)."""
DEFAULT_HEARTBEAT_PERIOD_SECONDS = 15
"""Seconds between the heartbeat events a source sends on an idle binlog stream (``MASTER_HEARTBEAT_PERIOD``)."""
HEARTBEAT_PERIOD_MAX_SECONDS = 600
"""The largest ``heartbeat_period`` accepted (the server takes up to 4294967 s, MySQL manual, "CHANGE
REPLICATION SOURCE TO": ``SOURCE_HEARTBEAT_PERIOD``; a stream then would wait 30 minutes to notice a dead
network)."""
STREAM_TIMEOUT_HEARTBEATS = 3
"""A binlog stream's reads and writes wait at most this many heartbeat periods: a live source sends
something at least once a period, so three silent periods mean the connection is dead."""

SSL_FIELDS = {"ssl_ca": "ca", "ssl_cert": "cert", "ssl_key": "key", "ssl_key_password": "password"}
"""Flat extra fields and the key each one sets in the pymysql ``ssl`` dict (also accepted as extra ``ssl``)."""
SSL_OBJECT_KEYS = ("ca", "capath", "cert", "key", "password", "cipher", "check_hostname")
"""Keys the extra ``ssl`` object may hold (pymysql's ``ssl`` dict; ``check_hostname`` only without ``tls``)."""

TlsMode = Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"]
TLS_MODES: tuple[str, ...] = ("disabled", "preferred", "required", "verify_ca", "verify_identity")
"""The extra ``tls``: the MySQL clients' ``--ssl-mode`` values, in lower case, with their meaning (MySQL manual,
"Command Options for Encrypted Connections"): ``disabled`` plaintext; ``preferred`` TLS when the server offers
it, else plaintext, the server not verified; ``required`` TLS or no connection, the server not verified;
``verify_ca`` as required, and the server's certificate must be signed by the CA (``ssl_ca``);
``verify_identity`` as verify_ca, and the certificate must name the host connected to. MariaDB's clients
spell the last three ``--ssl``, ``--ssl --ssl-ca``, ``--ssl-verify-server-cert``."""
VERIFYING_TLS_MODES = ("verify_ca", "verify_identity")
"""The modes that check the server's certificate against a CA."""

_FORM_EXCLUDED = ("ssl",)
"""Extras the hook accepts that the form does not show (the ``ssl`` object of plain ``mysql`` connections)."""


class SourceExtras(BaseModel):
    """The extras of a ``mysqlbinlog`` (or plain ``mysql``) connection; empty values count as unset.

    Unknown extras are ignored (a ``mysql`` connection carries extras of the MySQL provider).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    server_id: int | None = Field(
        None,
        ge=SERVER_ID_MIN,
        le=SERVER_ID_MAX,
        title="Replica server_id",
        description=(
            f"server_id the binlog stream presents to the source, {SERVER_ID_MIN}..{SERVER_ID_MAX}. It must "
            "differ from the source's own server_id and from every replica's. Leave empty to derive a stable "
            f"id from the pipeline name in [{SERVER_ID_BASE}, {SERVER_ID_BASE + SERVER_ID_SPAN}), i.e. "
            "[2^30, 2^31 - 1). A value set here applies to every pipeline using this connection."
        ),
    )
    flavor: Literal["mysql", "mariadb"] | None = Field(
        None,
        title="Server flavor",
        description="mysql or mariadb; leave empty to detect it from SELECT VERSION().",
    )
    ssl_ca: str | None = Field(
        None,
        title="TLS CA certificate file",
        description="Path on the worker of the PEM CA certificate; enables TLS and verifies the server.",
    )
    ssl_cert: str | None = Field(
        None,
        title="TLS client certificate file",
        description="Path on the worker of the PEM client certificate (for X509 / REQUIRE SUBJECT users).",
    )
    ssl_key: str | None = Field(
        None,
        title="TLS client key file",
        description="Path on the worker of the PEM private key of the client certificate.",
    )
    ssl_key_password: str | None = Field(
        None,
        title="TLS client key password",
        description="Password of an encrypted client key file.",
        json_schema_extra={"format": "password"},
    )
    ssl: dict[str, Any] | None = Field(
        None, description='The pymysql ssl object ({"ca": "/path/ca.pem", ...}); or the ssl_* extras.'
    )
    tls: TlsMode | None = Field(
        None,
        title="TLS mode",
        description=(
            "disabled, preferred, required, verify_ca or verify_identity (the MySQL clients' --ssl-mode). "
            "Leave empty for verify_identity when a CA file is set, required when only a client certificate "
            "is, else preferred (TLS when the server offers it, unverified). Applies to every connection: "
            "SQL, replication and snapshot reads. The files must exist on every machine that connects."
        ),
    )
    charset: str = Field("utf8mb4", title="Character set", description="Connection character set.")
    connect_timeout: int = Field(
        DEFAULT_CONNECT_TIMEOUT_SECONDS,
        ge=1,
        le=CONNECT_TIMEOUT_MAX_SECONDS,
        title="Connect timeout (seconds)",
        description=(
            "Seconds to wait for the TCP connection, and again for the login (the server's handshake and "
            "the authentication), before giving up. Applies to SQL and replication connections."
        ),
    )
    read_timeout: int = Field(
        DEFAULT_READ_TIMEOUT_SECONDS,
        ge=1,
        le=CONNECT_TIMEOUT_MAX_SECONDS,
        title="Read timeout (seconds)",
        description=(
            "Seconds an SQL query may wait for the server's answer (each read and write of the socket) "
            "before the task fails and retries. The binlog stream is bounded by the heartbeat period instead."
        ),
    )
    heartbeat_period: int = Field(
        DEFAULT_HEARTBEAT_PERIOD_SECONDS,
        ge=1,
        le=HEARTBEAT_PERIOD_MAX_SECONDS,
        title="Binlog heartbeat period (seconds)",
        description=(
            "Seconds between the heartbeats the source sends on an idle binlog stream "
            "(MASTER_HEARTBEAT_PERIOD). A stream that receives nothing for "
            f"{STREAM_TIMEOUT_HEARTBEATS} periods counts as lost: the task fails and retries. Default "
            f"{DEFAULT_HEARTBEAT_PERIOD_SECONDS}, so a dead network is noticed within "
            f"{STREAM_TIMEOUT_HEARTBEATS * DEFAULT_HEARTBEAT_PERIOD_SECONDS} s."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_empty(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {name: value for name, value in data.items() if value not in (None, "")}
        return data

    @model_validator(mode="after")
    def _one_ssl_source(self) -> SourceExtras:
        for name, key in SSL_FIELDS.items():
            value = getattr(self, name)
            if value is not None and self.ssl and key in self.ssl and self.ssl[key] != value:
                raise ValueError(f"extras {name} and ssl.{key} differ; set only one")
        unknown = sorted(set(self.ssl or {}) - set(SSL_OBJECT_KEYS))
        if unknown:
            raise ValueError(
                f"extra ssl.{unknown[0]} is not supported (ssl takes {', '.join(SSL_OBJECT_KEYS)}); set the "
                f"extra tls to one of {', '.join(TLS_MODES)} to choose how the server is verified"
            )
        return self

    @model_validator(mode="after")
    def _tls_consistent(self) -> SourceExtras:
        options, mode = self.ssl_options(), self.tls_mode()
        has_ca = bool(options.get("ca") or options.get("capath"))
        if "key" in options and "cert" not in options:
            raise ValueError(
                "extra ssl_key is set without ssl_cert: set ssl_cert to the client certificate file"
            )
        if self.tls is not None and self.ssl and "check_hostname" in self.ssl:
            raise ValueError(
                "extras tls and ssl.check_hostname are both set: remove ssl.check_hostname (tls=verify_identity "
                "checks the host name, tls=verify_ca does not)"
            )
        if mode == "disabled" and options:
            raise ValueError(
                f"extra tls=disabled but TLS files are set ({', '.join(sorted(options))}): remove them, or set "
                "tls to preferred, required, verify_ca or verify_identity"
            )
        if mode in VERIFYING_TLS_MODES and not has_ca:
            raise ValueError(
                f"extra tls={mode} verifies the server against a CA, but none is set: set ssl_ca to the PEM file "
                "of the CA that signed the server's certificate, or set tls=required to encrypt without verifying"
            )
        if mode in ("preferred", "required") and has_ca:
            raise ValueError(
                f"extra tls={mode} does not verify the server, but ssl_ca is set: set tls=verify_identity "
                "(or verify_ca) to verify it, or remove ssl_ca"
            )
        return self

    def tls_mode(self) -> TlsMode:
        """Return the connection's TLS mode: the extra ``tls``, else the mode its TLS files imply.

        Without ``tls``, a CA (``ssl_ca``, ``ssl.ca``, ``ssl.capath``) means ``verify_identity`` (what pymysql
        did with a CA: the server's certificate checked against it, and its host name unless
        ``ssl.check_hostname`` is false, then ``verify_ca``); a client certificate without a CA means
        ``required`` (pymysql required TLS for any ``ssl`` option, verifying nothing); nothing means
        ``preferred``, the MySQL clients' default and pymysql's since 1.2.
        """
        if self.tls is not None:
            return self.tls
        options = self.ssl_options()
        if options.get("ca") or options.get("capath"):
            return "verify_ca" if (self.ssl or {}).get("check_hostname") is False else "verify_identity"
        return "required" if options else "preferred"

    def tls_warnings(self) -> list[str]:
        """Return what the user should know about the TLS settings that is not an error (empty: nothing).

        A client certificate without a CA proves the client to the server, but the server is not verified:
        anyone between them can pose as the server.
        """
        options = self.ssl_options()
        if "cert" in options and self.tls_mode() not in VERIFYING_TLS_MODES:
            return [
                f"TLS mode {self.tls_mode()} with a client certificate (ssl_cert) but no CA: the server's "
                "certificate is not verified, so a machine between the worker and the server can pose as "
                "the server. Set ssl_ca and tls=verify_identity to verify it."
            ]
        return []

    def ssl_options(self) -> dict[str, Any]:
        """Return the TLS files and options: the ``ssl`` object plus the ``ssl_*`` fields ({} for none).

        Keys ``ca``, ``capath``, ``cert``, ``key``, ``password``, ``cipher`` (pymysql's ``ssl`` dict without
        ``check_hostname``, which :meth:`tls_mode` decides).
        """
        merged = {key: value for key, value in (self.ssl or {}).items() if key != "check_hostname"}
        for name, key in SSL_FIELDS.items():
            value = getattr(self, name)
            if value is not None:
                merged[key] = value
        return merged


def parse_extras(extras: Any) -> SourceExtras:
    """Validate a connection's extras (the parsed JSON of its ``extra``).

    :raises ValueError: naming each malformed extra and what it must be (never its value when secret).
    """
    if not isinstance(extras, dict):
        raise ValueError("extra must be a JSON object")
    try:
        return SourceExtras.model_validate(extras)
    except ValidationError as err:
        raise ValueError("; ".join(_describe(error, extras) for error in err.errors())) from None


def _describe(error: Any, extras: dict[str, Any]) -> str:
    """Return one pydantic error as the hook's message for it."""
    name = str(error["loc"][0]) if error["loc"] else ""
    raw = extras.get(name)
    kind = error["type"]
    if name == "ssl" and kind == "dict_type":
        return 'extra \'ssl\' must be an object like {"ca": "/path/ca.pem"}; or use the extras ssl_ca, ssl_cert, ssl_key'
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return f"extra {name}={raw!r} is not an integer"
    if kind in ("greater_than_equal", "less_than_equal"):
        field = SourceExtras.model_fields[name]
        low = next(m.ge for m in field.metadata if getattr(m, "ge", None) is not None)
        high = next(m.le for m in field.metadata if getattr(m, "le", None) is not None)
        return f"extra {name}={raw} must be in {low}..{high}"
    if kind == "literal_error":
        return f"extra {name}={raw!r} must be one of {error['ctx']['expected']}"
    if name in SSL_FIELDS or not name:
        return str(error["msg"]).removeprefix("Value error, ")
    return f"extra {name}: {error['msg']}"


def conn_fields() -> dict[str, dict[str, Any]]:
    """Return the form's extra fields in the provider info ``conn-fields`` format, from :class:`SourceExtras`.

    Each field has its ``label``, ``description`` and a JSON schema whose type admits null (an empty form
    field), with the model's limits and defaults; ``format: password`` marks a secret.
    """
    properties = SourceExtras.model_json_schema()["properties"]
    fields = {}
    for name, field in SourceExtras.model_fields.items():
        if name in _FORM_EXCLUDED:
            continue
        prop = properties[name]
        variants = prop.get("anyOf", [prop])
        typed = next(v for v in variants if v.get("type") != "null")
        schema: dict[str, Any] = {"type": [typed["type"], "null"]}
        if "enum" in typed or "const" in typed:
            schema["enum"] = [None, *typed.get("enum", [typed.get("const")])]
        for key in ("minimum", "maximum", "format"):
            if key in typed or key in prop:
                schema[key] = typed.get(key, prop.get(key))
        if field.default is not None:
            schema["default"] = field.default
        fields[name] = {"label": field.title, "description": field.description, "schema": schema}
    return fields
