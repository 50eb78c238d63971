"""Spark Connect operations that keep running after the client leaves: submit one, then watch it from elsewhere.

A deferrable merge or snapshot (``docs/adr/0024-deferrable-spark-work.md``) hands its long Spark action to the
Spark Connect server as a *reattachable* execution (``ReattachOptions(reattachable=True)``, Spark Connect
protocol ``base.proto``): the server keeps running it when the client's stream ends, until
``spark.connect.execute.manager.detachedTimeout`` (default 5 min) passes with no client attached. The Airflow
task submits the operation (:func:`submit_command`, :func:`submit_plan`), stops reading after the server
accepted it and defers; the trigger attaches again from the triggerer with :func:`watch_operation`
(``ReattachExecute`` until ``result_complete``) and releases the operation and the session when it ends.

Everything that touches pyspark's private client API (``SparkConnectClient._execute_plan_request_with_metadata``,
``_stub``, ``_builder``, ``DataFrameWriter._write``, ``DataFrame._plan``) is in this module, and
``tests/integration/test_deferrable.py`` exercises each of them against the pinned pyspark, so an upgrade that
changes them fails there, not in a user's DAG. No Airflow here (import-linter contract).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.readwriter import DataFrameWriter

log = logging.getLogger(__name__)

#: gRPC codes on which the watcher attaches again instead of giving up (server restarting, stream cut).
RETRY_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")
#: Consecutive failed attaches after which the watcher reports the operation as lost.
MAX_ATTACH_FAILURES = 5
#: Seconds between failed attaches (the server's detached timeout is minutes, default 5 min).
ATTACH_RETRY_SECONDS = 10.0


@dataclass(frozen=True)
class DetachedOperation:
    """A Spark Connect operation the server runs without a client attached.

    :param session_id: the client session that owns it (the server ends its operations when it is released).
    :param operation_id: the operation's UUID (chosen by the client).
    :param server_side_session_id: the server's id of the session, when the server sent one (a reattach
        after a server restart then fails instead of attaching to a different session).
    :param user_id: the user of the session, if the connection names one.
    :param description: what the operation does, for logs (``"write w7-... of shop.customers"``).
    """

    session_id: str
    operation_id: str
    server_side_session_id: str = ""
    user_id: str = ""
    description: str = ""

    def to_dict(self) -> dict[str, str]:
        """Return the handle as JSON-able keyword arguments (:meth:`from_dict` reads them back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DetachedOperation:
        """Return the handle :meth:`to_dict` gave.

        :raises ValueError: if ``session_id`` or ``operation_id`` is missing or not a UUID.
        """
        for key in ("session_id", "operation_id"):
            try:
                uuid.UUID(str(data.get(key)))
            except ValueError as err:
                raise ValueError(f"{key} must be a UUID, got {data.get(key)!r}") from err
        return cls(**{k: str(data.get(k) or "") for k in cls.__dataclass_fields__})


class OperationDetached(Exception):  # noqa: N818 (a signal, not an error: the job goes on in the server)
    """Raised through a job when its action was handed to the server as a :class:`DetachedOperation`.

    Not a :class:`~airflow_provider_binlog.contract.ContractError`: nothing failed. The operator that
    enabled detaching (:func:`~airflow_provider_binlog.jobs.actions.detaching`) catches it and defers.

    :param operation: the operation the server now runs.
    """

    def __init__(self, operation: DetachedOperation) -> None:
        super().__init__(
            f"Spark Connect operation {operation.operation_id} runs detached: {operation.description}"
        )
        self.operation = operation


def writer_command(writer: DataFrameWriter, path: str) -> Any:
    """Return the Spark Connect ``Command`` that ``writer.save(path)`` would execute, without executing it.

    :param writer: a Spark Connect ``DataFrameWriter`` with its format, mode, options and partitioning set.
    :param path: the output location.
    """
    write: Any = writer._write  # type: ignore[attr-defined]
    write.path = path
    return write.command(writer._spark.client)  # type: ignore[attr-defined]


def submit_command(spark: SparkSession, command: Any, description: str) -> DetachedOperation:
    """Start a Spark Connect command (a write) as a detached operation; return its handle.

    :param spark: a Spark Connect session.
    :param command: a ``pyspark.sql.connect.proto.Command`` (:func:`writer_command`).
    :param description: what it does, for logs.
    :raises pyspark.errors.PySparkException: when the server refuses the operation.
    """
    return _submit(spark, lambda request: request.plan.command.CopyFrom(command), description)


def submit_plan(spark: SparkSession, frame: DataFrame, description: str) -> DetachedOperation:
    """Start collecting a DataFrame as a detached operation; return its handle (the rows are not read).

    :param spark: a Spark Connect session.
    :param frame: a Spark Connect DataFrame whose computation has side effects (the snapshot's chunk reads).
    :param description: what it does, for logs.
    :raises pyspark.errors.PySparkException: when the server refuses the operation.
    """
    client: Any = spark.client  # type: ignore[attr-defined]
    connect_frame: Any = frame
    plan = connect_frame._plan.to_proto(client)
    return _submit(spark, lambda request: request.plan.CopyFrom(plan), description)


def _submit(spark: SparkSession, fill: Callable[[Any], Any], description: str) -> DetachedOperation:
    """Send an ``ExecutePlan`` with reattach enabled, read the first response, then leave the stream."""
    import grpc
    from pyspark.sql.connect.proto import base_pb2 as pb2

    client: Any = spark.client  # type: ignore[attr-defined]
    request = client._execute_plan_request_with_metadata(operation_id=str(uuid.uuid4()))
    fill(request)
    request.request_options.append(
        pb2.ExecutePlanRequest.RequestOption(reattach_options=pb2.ReattachOptions(reattachable=True))
    )
    stream = client._stub.ExecutePlan(request, metadata=client._builder.metadata())
    try:
        first = next(stream)  # the server registered the operation (its first response names it)
    except grpc.RpcError as err:
        client._handle_error(err)  # raises the PySparkException the server's error maps to
        raise
    finally:
        stream.cancel()  # a reattachable execution goes on without us
    operation = DetachedOperation(
        session_id=request.session_id,
        operation_id=request.operation_id,
        server_side_session_id=first.server_side_session_id,
        user_id=request.user_context.user_id,
        description=description,
    )
    log.info("submitted %s as detached Spark Connect operation %s", description, operation.operation_id)
    return operation


def leave_session(spark: SparkSession) -> None:
    """Make ``spark.stop()`` close only the client: the server keeps the session and its detached operation.

    (``stop()`` releases the session by default, and the server then interrupts the session's operations;
    the trigger releases it when the operation ended.)

    :param spark: a Spark Connect session.
    """
    spark.release_session_on_close = False  # type: ignore[attr-defined]


@dataclass(frozen=True)
class OperationOutcome:
    """How a watched operation ended.

    :param status: ``success`` (``result_complete`` received) or ``error``.
    :param message: the server's error, or what happened.
    :param lost: whether the server no longer knows the operation (abandoned after the detached timeout,
        server restarted, session released): it may have done part of its work.
    """

    status: str
    message: str
    lost: bool = False

    def event(self, operation: DetachedOperation) -> dict[str, Any]:
        """Return the payload that resumes the task: ``{"status", "message", "lost", "operation_id"}``."""
        return {
            "status": self.status,
            "message": self.message,
            "lost": self.lost,
            "operation_id": operation.operation_id,
        }


@overload
async def watch_operation(
    url: str,
    operation: DetachedOperation,
    *,
    heartbeat: Callable[[int], Awaitable[None]] | None = ...,
    retry_seconds: float = ...,
    within: None = ...,
) -> OperationOutcome: ...


@overload
async def watch_operation(
    url: str,
    operation: DetachedOperation,
    *,
    heartbeat: Callable[[int], Awaitable[None]] | None = ...,
    retry_seconds: float = ...,
    within: float,
) -> OperationOutcome | None: ...


async def watch_operation(
    url: str,
    operation: DetachedOperation,
    *,
    heartbeat: Callable[[int], Awaitable[None]] | None = None,
    retry_seconds: float = ATTACH_RETRY_SECONDS,
    within: float | None = None,
) -> OperationOutcome | None:
    """Attach to a detached operation until it completes or fails (``ReattachExecute``, grpc.aio); then release it.

    The server ends a reattach stream after a while (``spark.connect.execute.reattachable.senderMaxStreamDuration``)
    without ``result_complete``; the watcher attaches again after the last response it saw. Unavailable
    servers are retried :data:`MAX_ATTACH_FAILURES` times, ``retry_seconds`` apart. When the operation ends,
    its responses and its session are released (``ReleaseExecute``, ``ReleaseSession``).

    :param url: the Spark Connect URL (``sc://host:port/;token=...``) of the server running it.
    :param operation: the handle from :func:`submit_command` or :func:`submit_plan`.
    :param heartbeat: awaited with the number of responses seen after each reattach stream, for logs.
    :param retry_seconds: seconds between failed attaches.
    :param within: seconds to watch before giving up (None: until it ends). Giving up returns None and leaves
        the operation and its session to a later watcher (the trigger); only the attaching is bounded, so an
        operation seen to end is always released and reported.
    """
    import grpc
    from pyspark.sql.connect.client.core import DefaultChannelBuilder
    from pyspark.sql.connect.proto import base_pb2 as pb2
    from pyspark.sql.connect.proto import base_pb2_grpc

    builder = DefaultChannelBuilder(url)
    metadata = tuple(builder.metadata())
    user = pb2.UserContext(user_id=operation.user_id)
    what = operation.description or f"operation {operation.operation_id}"
    clock = asyncio.get_running_loop().time
    deadline = None if within is None else clock() + within
    async with _aio_channel(builder) as channel:
        stub = base_pb2_grpc.SparkConnectServiceStub(channel)
        last_response_id = ""
        responses = 0
        failures = 0
        while True:
            request = pb2.ReattachExecuteRequest(
                session_id=operation.session_id,
                user_context=user,
                operation_id=operation.operation_id,
                client_type="airflow-provider-binlog-trigger",
            )
            if operation.server_side_session_id:
                request.client_observed_server_side_session_id = operation.server_side_session_id
            if last_response_id:
                request.last_response_id = last_response_id
            try:
                attach = _attach(stub.ReattachExecute(request, metadata=metadata))
                if deadline is None:
                    complete, last, seen = await attach
                else:
                    complete, last, seen = await asyncio.wait_for(attach, max(0.0, deadline - clock()))
                if seen:
                    failures, responses, last_response_id = 0, responses + seen, last
                if complete:
                    await _release(stub, pb2, operation, user, metadata)
                    return OperationOutcome("success", f"{what}: done")
            except asyncio.TimeoutError:
                return None
            except grpc.aio.AioRpcError as err:
                code = err.code().name
                if code in RETRY_CODES and failures < MAX_ATTACH_FAILURES:
                    if deadline is not None and clock() + retry_seconds > deadline:
                        return None
                    failures += 1
                    log.warning("attaching to %s failed (%s), retrying", operation.operation_id, code)
                    await asyncio.sleep(retry_seconds)
                    continue
                details = err.details() or code
                # INVALID_HANDLE.*: operation or session not found, closed or abandoned (Spark error classes)
                lost = "INVALID_HANDLE" in details or code in RETRY_CODES
                await _release(stub, pb2, operation, user, metadata)
                return OperationOutcome("error", f"{what}: {details}", lost=lost)
            if heartbeat is not None:
                await heartbeat(responses)


async def _attach(call: Any) -> tuple[bool, str, int]:
    """Read one reattach stream; return whether it reached ``result_complete``, its last response id, its responses."""
    last, seen = "", 0
    async for response in call:
        seen += 1
        last = response.response_id
        if response.HasField("result_complete"):
            return True, last, seen
    return False, last, seen


async def _release(stub: Any, pb2: Any, operation: DetachedOperation, user: Any, metadata: Any) -> None:
    """Release the operation's buffered responses and its session (best effort: the server times both out)."""
    import grpc

    release = pb2.ReleaseExecuteRequest(
        session_id=operation.session_id,
        user_context=user,
        operation_id=operation.operation_id,
        release_all=pb2.ReleaseExecuteRequest.ReleaseAll(),
    )
    session = pb2.ReleaseSessionRequest(session_id=operation.session_id, user_context=user)
    for call, request in ((stub.ReleaseExecute, release), (stub.ReleaseSession, session)):
        try:
            await call(request, metadata=metadata)
        except grpc.aio.AioRpcError as err:
            log.info("releasing %s: %s", operation.operation_id, err.details() or err.code().name)


def _aio_channel(builder: Any) -> Any:
    """Return a grpc.aio channel with the endpoint, TLS and token of a Spark Connect URL (as pyspark builds it)."""
    import grpc

    if not builder.secure:
        return grpc.aio.insecure_channel(builder.endpoint)
    local = not builder.use_ssl and builder.host == "localhost"
    creds = grpc.local_channel_credentials() if local else grpc.ssl_channel_credentials()
    if builder.token is not None:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(builder.token))
    return grpc.aio.secure_channel(builder.endpoint, creds)
