"""The asyncio shell around the sans-io core: Client, and its Producer,
Consumer and Admin handles.

One Client is one connection. Its reader task feeds the broker's bytes to
the core; calls queue requests in the core and wait for their completions;
every Ready the core produces is written and dispatched at once, on the
event loop's thread (the core is never touched from another thread).
"""

from __future__ import annotations

import asyncio
import os
import ssl as _ssl
import uuid as _uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, TypeVar

from . import wire
from ._errors_gen import FilaError, error_for
from .core import Config, Conn, ConnectionLost, CoreError, HandshakeError, Ready, Redirect

__version__ = "0.1.0"

F = TypeVar("F", bound=wire.Frame)


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


class ClosedError(CoreError):
    """A call on a client that was closed."""

    def __init__(self) -> None:
        super().__init__("fila: client closed")


class Message:
    """One message to send: queue, payload and the options the broker
    schedules it by. Keyword options: headers (a mapping, kept in order),
    fairness_key, weight (0 means 1), throttle_keys, delay (seconds),
    idempotency_key, ordering_key; any other keyword names a field of the
    protocol's EnqueueMessage (such as one a newer broker adds) and is set
    as is. header() adds one header and returns the message, for chaining.
    """

    __slots__ = ("m",)

    def __init__(self, queue: str, payload: bytes = b"", *, headers: Mapping[str, str] | None = None,
                 fairness_key: str = "", weight: int = 0, throttle_keys: Iterable[str] = (),
                 delay: float = 0.0, idempotency_key: str = "", ordering_key: str = "", **fields: Any) -> None:
        self.m = wire.EnqueueMessage(
            queue=queue,
            headers=[wire.MessageHeader(k, v) for k, v in (headers or {}).items()],
            payload=bytes(payload),
            fairness_key=fairness_key,
            weight=weight,
            throttle_keys=list(throttle_keys),
            delay_ms=_ms(delay),
            idempotency_key=idempotency_key,
            ordering_key=ordering_key,
        )
        for k, v in fields.items():
            if not hasattr(self.m, k):
                raise TypeError(f"fila: a message has no field {k!r}")
            setattr(self.m, k, v)

    def header(self, key: str, value: str) -> Message:
        """Add a header (keys starting with fila- are reserved); returns self."""
        self.m.headers.append(wire.MessageHeader(key, value))
        return self

    @property
    def queue(self) -> str:
        """The target queue."""
        return self.m.queue


class SendResult:
    """The outcome of one message of a batch: id (16 bytes) when stored,
    duplicate when the broker already held it (id is the first's), error
    (a FilaError) when it failed."""

    __slots__ = ("id", "duplicate", "error")

    def __init__(self, id: bytes, duplicate: bool, error: FilaError | None) -> None:
        self.id = id
        self.duplicate = duplicate
        self.error = error

    def __repr__(self) -> str:
        return f"SendResult(id={_uuid.UUID(bytes=self.id)}, duplicate={self.duplicate}, error={self.error!r})"


class Delivery:
    """One delivered message, leased to its subscription until
    lease_deadline_ms. Settle it once: ack, nack, retry_after or release;
    extend_lease keeps long work alive. Each raises the item's FilaError
    (LeaseExpiredError once the lease ended, MessageNotFoundError once the
    message left the queue)."""

    __slots__ = ("_client", "_sub", "m", "lease_deadline_ms")

    def __init__(self, client: Client, sub: int, m: wire.DeliveredMessage) -> None:
        self._client = client
        self._sub = sub
        self.m = m
        self.lease_deadline_ms = m.lease_deadline_at_ms

    @property
    def id(self) -> bytes:
        """The message ID, 16 bytes (a UUIDv7)."""
        return self.m.id

    @property
    def uuid(self) -> _uuid.UUID:
        """The message ID as a UUID."""
        return _uuid.UUID(bytes=self.m.id)

    @property
    def queue(self) -> str:
        """The queue it was delivered from."""
        return self.m.queue

    @property
    def payload(self) -> bytes:
        """The message body."""
        return self.m.payload

    @property
    def headers(self) -> dict[str, str]:
        """The headers, in order (dead-lettered messages carry fila-attempts
        and fila-error)."""
        return {h.key: h.value for h in self.m.headers}

    @property
    def fairness_key(self) -> str:
        """The resolved fairness key."""
        return self.m.fairness_key

    @property
    def weight(self) -> int:
        """The resolved weight."""
        return self.m.weight

    @property
    def throttle_keys(self) -> list[str]:
        """The resolved throttle keys."""
        return self.m.throttle_keys

    @property
    def ordering_key(self) -> str:
        """The ordering key, empty for none."""
        return self.m.ordering_key

    @property
    def attempt(self) -> int:
        """Which delivery attempt this is, from 1."""
        return self.m.attempt

    @property
    def enqueued_at_ms(self) -> int:
        """When the broker accepted the message, Unix milliseconds."""
        return self.m.enqueued_at_ms

    @property
    def lease(self) -> int:
        """The lease number the settling requests name."""
        return self.m.lease

    def _what(self, op: str) -> str:
        return f"{op} {self.m.queue} {_uuid.UUID(bytes=self.m.id)}"

    def _ref(self) -> wire.LeaseRef:
        return wire.LeaseRef(queue=self.m.queue, id=self.m.id, lease=self.m.lease)

    async def ack(self) -> None:
        """Acknowledge: the broker deletes the message, durably."""
        await self._client._ack([self])

    async def nack(self, reason: str = "") -> None:
        """Report a failure; the queue's policy retries or dead-letters it."""
        c = self._client
        c._settle([self])
        f = await c._call(wire.Nack(items=[wire.NackItem(queue=self.m.queue, id=self.m.id, lease=self.m.lease, reason=reason)]),
                          self._what("nack"))
        _item(f, 0, self._what("nack"))

    async def retry_after(self, delay: float) -> None:
        """Fail with an explicit backoff: redelivered no sooner than delay
        seconds from now, counting the attempt."""
        c = self._client
        c._settle([self])
        f = await c._call(wire.RetryAfter(items=[wire.RetryAfterItem(queue=self.m.queue, id=self.m.id, lease=self.m.lease,
                                                                     delay_ms=_ms(delay))]), self._what("retry"))
        _item(f, 0, self._what("retry"))

    async def release(self) -> None:
        """Give the message back unstarted: ready again at once, without
        counting an attempt."""
        c = self._client
        c._settle([self])
        f = await c._call(wire.Release(items=[self._ref()]), self._what("release"))
        _item(f, 0, self._what("release"))

    async def extend_lease(self, duration: float) -> int:
        """Move the lease's deadline to now plus duration seconds; returns
        the new deadline, Unix milliseconds."""
        f = await self._client._call(wire.ExtendLease(items=[wire.ExtendLeaseItem(
            queue=self.m.queue, id=self.m.id, lease=self.m.lease, duration_ms=_ms(duration))]), self._what("extend lease"))
        assert isinstance(f, wire.ExtendLeaseResult)
        _item(f, 0, self._what("extend lease"))
        self.lease_deadline_ms = f.results[0].lease_deadline_at_ms
        return self.lease_deadline_ms


def _item(f: wire.Frame, i: int, what: str) -> None:
    """Raise item i's error of a batch response."""
    results: list[Any] = getattr(f, "results")
    if i >= len(results):
        raise FilaError(f"the broker answered {len(results)} results", op=what)
    r = results[i]
    if r.code != 0:
        raise error_for(r.code, r.message, op=what)


class Subscription:
    """A subscription's deliveries, as an async iterator: `async for d in
    sub`. Iteration ends when the subscription is closed; it raises the
    error (a FilaError such as QueueNotFoundError, or ConnectionLost) when
    the broker or the connection ended it. prefetch is the credit the
    broker granted: the most deliveries held unsettled at once."""

    def __init__(self, client: Client, id: int, queue: str) -> None:
        self._client = client
        self.id = id
        self.queue = queue
        self.prefetch = 0
        self._buf: deque[Delivery] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self.error: BaseException | None = None
        """Why the subscription ended; None while open or after close."""

    def _push(self, msgs: list[wire.DeliveredMessage]) -> None:
        for m in msgs:
            self._buf.append(Delivery(self._client, self.id, m))
        self._wake()

    def _end(self, err: BaseException | None) -> None:
        self._ended = True
        self.error = err
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        while not self._buf:
            if self._ended:
                if self.error is not None:
                    raise self.error
                raise StopAsyncIteration
            self._waiter = self._client._loop.create_future()
            await self._waiter
            self._waiter = None
        return self._buf.popleft()

    async def next(self, timeout: float | None = None) -> Delivery:
        """The next delivery, waiting at most timeout seconds (None: no
        limit). Raises asyncio.TimeoutError, StopAsyncIteration once closed,
        or the error that ended the subscription."""
        return await asyncio.wait_for(self.__anext__(), timeout)

    async def wait_ended(self, timeout: float | None = None) -> BaseException | None:
        """Wait until the subscription ends (deliveries still buffered are
        discarded); returns why, None after close."""
        async def drain() -> None:
            while True:
                try:
                    await self.__anext__()
                except StopAsyncIteration:
                    return
                except BaseException:
                    return
        await asyncio.wait_for(drain(), timeout)
        return self.error

    async def close(self) -> None:
        """Unsubscribe. Deliveries received but not yet taken from the
        iterator are released back to the queue; those taken keep their
        leases and can still be settled."""
        if self._ended:
            return
        c = self._client
        req = c._core.unsubscribe(self.id)
        await c._wait(req, f"unsubscribe {self.queue}")
        left = list(self._buf)
        self._buf.clear()
        if left:
            c._settle(left)
            f = await c._call(wire.Release(items=[d._ref() for d in left]), f"release {self.queue}")
            del f


class Producer:
    """Sends messages. Sends made concurrently (in the same turn of the
    event loop, or while the connection is busy) travel in one Enqueue
    frame. Every Enqueue carries the producer's random ID and the sequence
    of its first message, so a resent frame is not enqueued twice."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def send(self, message: Message) -> bytes:
        """Send one message; returns its ID (16 bytes). Raises its
        FilaError (QueueNotFoundError, MessageTooLargeError, ...)."""
        r = (await self._client._enqueue([message.m]))[0]
        if r.error is not None:
            raise r.error
        return r.id

    async def enqueue(self, queue: str, payload: bytes) -> bytes:
        """Send payload to queue with no options; returns its ID."""
        return await self.send(Message(queue, payload))

    async def send_batch(self, messages: Iterable[Message]) -> list[SendResult]:
        """Send messages in one Enqueue; each succeeds or fails on its own
        (SendResult.error). Raises only when the whole request failed."""
        return await self._client._enqueue([m.m for m in messages])


class Consumer:
    """Opens subscriptions and settles deliveries in batches."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def subscribe(self, queue: str, prefetch: int = 64, rate_limits: Iterable[wire.RateLimit] = (),
                        **fields: Any) -> Subscription:
        """Subscribe to queue; prefetch is the most deliveries held
        unsettled at once (0: the broker's cap). Other keywords name fields
        of the Subscribe frame (such as lease_timeout_ms). Raises
        QueueNotFoundError."""
        c = self._client
        c._check()
        sub_id = c._core.subscribe(queue, prefetch, list(rate_limits), **fields)
        sub = Subscription(c, sub_id, queue)
        c._subs[sub_id] = sub
        try:
            f = await c._wait(sub_id, f"subscribe {queue}")
        except BaseException:
            c._subs.pop(sub_id, None)
            raise
        assert isinstance(f, wire.SubscribeOk)
        sub.prefetch = f.prefetch
        return sub

    async def ack_all(self, deliveries: Iterable[Delivery]) -> None:
        """Acknowledge several deliveries in one Ack; raises the first
        item's error, after all were tried."""
        await self._client._ack(list(deliveries))


class Admin:
    """Queue, configuration, key and cluster administration. Each method
    sends one request and raises its FilaError; call() sends any request
    frame and returns its response frame."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def call(self, frame: wire.Frame, what: str = "") -> wire.Frame:
        """Send any request frame; returns the response frame or raises
        the broker's error."""
        return await self._client._call(frame, what or frame.NAME)

    async def create_queue(self, name: str, *, visibility_timeout: float = 0.0, max_attempts: int = 0,
                           backoff: tuple[float, float] = (0.0, 0.0), dedup_window: float = 0.0,
                           on_enqueue: str = "", on_failure: str = "", **fields: Any) -> wire.CreateQueueOk:
        """Create a queue and its dead-letter queue; durations in seconds,
        zero for the broker's default. Other keywords name CreateQueue's
        fields (policy, tenant_separator, cost_by_time, shards, ...).
        Raises QueueExistsError, ScriptError, InvalidArgumentError."""
        f = wire.CreateQueue(name=name, visibility_timeout_ms=_ms(visibility_timeout), on_enqueue=on_enqueue,
                             on_failure=on_failure, max_attempts=max_attempts, backoff_base_ms=_ms(backoff[0]),
                             backoff_max_ms=_ms(backoff[1]), dedup_window_ms=_ms(dedup_window))
        for k, v in fields.items():
            if not hasattr(f, k):
                raise TypeError(f"fila: CreateQueue has no field {k!r}")
            setattr(f, k, v)
        return _as(wire.CreateQueueOk, await self._client._call(f, f"create queue {name}"))

    async def delete_queue(self, name: str) -> None:
        """Delete a queue, its messages and its DLQ. Raises QueueNotFoundError."""
        await self._client._call(wire.DeleteQueue(name=name), f"delete queue {name}")

    async def list_queues(self) -> list[wire.QueueSummary]:
        """Every queue with its counts."""
        return _as(wire.ListQueuesResult, await self._client._call(wire.ListQueues(), "list queues")).queues

    async def queue_stats(self, name: str, **fields: Any) -> wire.QueueStatsResult:
        """A queue's statistics. Raises QueueNotFoundError."""
        return _as(wire.QueueStatsResult, await self._client._call(_frame(wire.QueueStats(name=name), fields), f"stats {name}"))

    async def explain(self, queue: str, id: bytes) -> wire.ExplainResult:
        """Why a message waits. Raises MessageNotFoundError, QueueNotFoundError."""
        return _as(wire.ExplainResult, await self._client._call(wire.Explain(queue=queue, id=id), f"explain {queue}"))

    async def redrive(self, dead_letter_queue: str, count: int = 0, **fields: Any) -> int:
        """Move up to count messages (0: all) of a DLQ back to its queue;
        returns how many moved. Raises NotADlqError, QueueNotFoundError."""
        f = _frame(wire.Redrive(dead_letter_queue=dead_letter_queue, count=count), fields)
        r = await self._client._call(f, f"redrive {dead_letter_queue}")
        moved: int = getattr(r, "moved", 0)
        return moved

    async def set_config(self, key: str, value: str) -> None:
        """Set a runtime-config key. Raises InvalidConfigValueError."""
        await self._client._call(wire.SetConfig(key=key, value=value), f"set config {key}")

    async def get_config(self, key: str) -> str | None:
        """A runtime-config value, None when not set."""
        r = _as(wire.GetConfigResult, await self._client._call(wire.GetConfig(key=key), f"get config {key}"))
        return r.value if r.found else None

    async def list_config(self, prefix: str = "") -> list[wire.ConfigEntry]:
        """The runtime-config entries whose keys start with prefix."""
        return _as(wire.ListConfigResult, await self._client._call(wire.ListConfig(prefix=prefix), "list config")).entries

    async def delete_config(self, key: str) -> bool:
        """Delete a runtime-config key; returns whether it existed."""
        r = _as(wire.DeleteConfigOk, await self._client._call(wire.DeleteConfig(key=key), f"delete config {key}"))
        return r.existed

    async def create_api_key(self, name: str, permissions: Iterable[wire.Permission] = ()) -> wire.CreateApiKeyResult:
        """Mint an API key (its secret is shown only here)."""
        return _as(wire.CreateApiKeyResult, await self._client._call(
            wire.CreateApiKey(name=name, permissions=list(permissions)), f"create api key {name}"))

    async def revoke_api_key(self, key_id: str) -> None:
        """Revoke a key. Raises ApiKeyNotFoundError."""
        await self._client._call(wire.RevokeApiKey(key_id=key_id), f"revoke api key {key_id}")

    async def list_api_keys(self) -> list[wire.ApiKeyInfo]:
        """Every API key, never with its secret."""
        return _as(wire.ListApiKeysResult, await self._client._call(wire.ListApiKeys(), "list api keys")).keys

    async def set_acl(self, key_id: str, permissions: Iterable[wire.Permission]) -> None:
        """Replace a key's ACL. Raises ApiKeyNotFoundError."""
        await self._client._call(wire.SetAcl(key_id=key_id, permissions=list(permissions)), f"set acl {key_id}")

    async def get_acl(self, key_id: str) -> list[wire.Permission]:
        """A key's ACL. Raises ApiKeyNotFoundError."""
        return _as(wire.GetAclResult, await self._client._call(wire.GetAcl(key_id=key_id), f"get acl {key_id}")).permissions

    async def cluster_status(self) -> wire.ClusterStatusResult:
        """The answering node's view of the cluster."""
        return _as(wire.ClusterStatusResult, await self._client._call(wire.ClusterStatus(), "cluster status"))


def _frame(f: F, fields: Mapping[str, Any]) -> F:
    for k, v in fields.items():
        if not hasattr(f, k):
            raise TypeError(f"fila: {f.NAME} has no field {k!r}")
        setattr(f, k, v)
    return f


def _as(cls: type[F], f: wire.Frame) -> F:
    if not isinstance(f, cls):
        raise FilaError(f"the broker answered {f.NAME}; want {cls.__name__}")
    return f


class Client:
    """One connection to a Fila broker. Create it with `await
    Client.connect(addr)`; use it as an async context manager or call
    close(). Not thread-safe: use it from one event loop."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, core: Conn,
                 on_redirect: Callable[[Redirect], None] | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._core = core
        self._calls: dict[int, tuple[asyncio.Future[wire.Frame], str]] = {}
        self._subs: dict[int, Subscription] = {}
        self._hs: asyncio.Future[None] = self._loop.create_future()
        self._eof: asyncio.Future[None] = self._loop.create_future()
        self._timer: asyncio.TimerHandle | None = None
        self._pump_scheduled = False
        self._closed = False
        self._on_redirect = on_redirect
        self._producer_id = os.urandom(16)
        self._sequence = 1
        self._acc: list[wire.EnqueueMessage] = []
        self._acc_futs: list[tuple[int, asyncio.Future[list[SendResult]]]] = []
        self._acks: list[Delivery] = []
        self._ack_futs: list[tuple[int, asyncio.Future[list[FilaError | None]]]] = []
        self.producer = Producer(self)
        """Sends messages."""
        self.consumer = Consumer(self)
        """Opens subscriptions."""
        self.admin = Admin(self)
        """Administration."""
        self._task = self._loop.create_task(self._read())

    @classmethod
    async def connect(cls, addr: str, *, api_key: str = "", ssl: _ssl.SSLContext | bool | None = None,
                      server_hostname: str | None = None, client_name: str = f"fila-python/{__version__}",
                      timeout: float = 10.0, keepalive: float = 30.0, max_frame_size: int = 0,
                      on_redirect: Callable[[Redirect], None] | None = None) -> Client:
        """Connect to addr (host:port; the port defaults to 5555) and
        handshake. ssl: an SSLContext, or True for the system's default
        trust. timeout bounds the dial and the handshake, in seconds;
        keepalive is the idle time before a Ping (negative: none).
        on_redirect is called for each request the broker redirected
        (NOT_LEADER with its leader's address). Raises UnauthorizedError,
        OSError, asyncio.TimeoutError, or a CoreError."""
        host, _, port = addr.rpartition(":")
        if not host:
            host, port = addr, str(wire.DEFAULT_PORT)
        host = host.strip("[]")
        ctx: _ssl.SSLContext | None
        if ssl is True:
            ctx = _ssl.create_default_context()
        elif ssl is False or ssl is None:
            ctx = None
        else:
            ctx = ssl
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            host, int(port), ssl=ctx, server_hostname=server_hostname if ctx else None, limit=1 << 20), timeout)
        core = Conn(Config(client_name=client_name, api_key=api_key, max_frame_size=max_frame_size,
                           keepalive_interval=keepalive, keepalive_timeout=timeout))
        c = cls(reader, writer, core, on_redirect)
        c._pump()
        try:
            await asyncio.wait_for(asyncio.shield(c._hs), timeout)
        except BaseException:
            c._abort()
            raise
        return c

    @property
    def node_id(self) -> str:
        """The broker's node ID, from the handshake."""
        return self._core.state.node_id

    @property
    def server_name(self) -> str:
        """The broker's software and version, from the handshake."""
        return self._core.state.server_name

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the loop -------------------------------------------------------

    async def _read(self) -> None:
        err: BaseException
        try:
            while True:
                data = await self._reader.read(1 << 18)
                if not data:
                    err = EOFError("EOF")
                    break
                self._core.tick(self._loop.time())
                try:
                    self._core.receive(data)
                except Exception:
                    pass  # the failure is in the Ready
                self._pump()
                if self._core.state.failed:
                    return
        except (OSError, asyncio.IncompleteReadError) as e:
            err = e
        except asyncio.CancelledError:
            return
        if not self._eof.done():
            self._eof.set_result(None)
        self._core.lost(err)
        self._pump()

    def _schedule(self) -> None:
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Write what the core has and dispatch its events."""
        self._pump_scheduled = False
        self._flush_enqueue()
        self._flush_acks()
        c = self._core
        c.tick(self._loop.time())
        while c.has_ready():
            rd = c.ready()
            c.advance(rd)
            if rd.out and not self._writer.is_closing():
                self._writer.write(rd.out)
            self._dispatch(rd)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        rd_deadline = c.deadline()
        if rd_deadline and not c.state.failed:
            self._timer = self._loop.call_at(rd_deadline, self._pump)

    def _dispatch(self, rd: Ready) -> None:
        for cp in rd.completions:
            entry = self._calls.pop(cp.request_id, None)
            if entry is None:
                continue
            fut, what = entry
            if fut.done():
                continue
            if cp.error is not None:
                err = cp.error
                if isinstance(err, FilaError):
                    err.op = what
                    err.args = (str(err),)
                fut.set_exception(err)
            else:
                assert cp.response is not None
                fut.set_result(cp.response)
        for d in rd.deliveries:
            sub = self._subs.get(d.subscription)
            if sub is not None:
                sub._push(d.messages)
        for e in rd.ended:
            sub = self._subs.pop(e.subscription, None)
            if sub is not None:
                if isinstance(e.error, FilaError):
                    e.error.op = f"subscription {sub.queue}"
                    e.error.args = (str(e.error),)
                sub._end(e.error)
        for r in rd.redirects:
            if self._on_redirect is not None:
                self._on_redirect(r)
        st = rd.state
        if st is not None:
            if st.handshaken and not self._hs.done():
                self._hs.set_result(None)
            if st.failed:
                err = st.error if st.error is not None else ConnectionLost(EOFError("EOF"))
                if not self._hs.done():
                    self._hs.set_exception(err.error if isinstance(err, HandshakeError) else err)
                    self._hs.exception()
                lost = err if isinstance(err, ConnectionLost) else ConnectionLost(err)
                for fut, _ in self._calls.values():
                    if not fut.done():
                        fut.set_exception(lost)
                self._calls.clear()
                if not self._writer.is_closing():
                    self._writer.close()

    # -- calls ----------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise ClosedError()
        st = self._core.state
        if st.failed:
            assert st.error is not None
            raise ConnectionLost(st.error)

    async def _wait(self, req: int, what: str) -> wire.Frame:
        fut: asyncio.Future[wire.Frame] = self._loop.create_future()
        self._calls[req] = (fut, what)
        self._schedule()
        return await fut

    async def _call(self, f: wire.Frame, what: str) -> wire.Frame:
        self._check()
        return await self._wait(self._core.send(f), what)

    async def ping(self) -> float:
        """Round-trip a Ping; returns the time it took, in seconds."""
        start = self._loop.time()
        await self._call(wire.Ping(nonce=int.from_bytes(os.urandom(8), "big")), "ping")
        return self._loop.time() - start

    def _settle(self, ds: list[Delivery]) -> None:
        by_sub: dict[int, list[int]] = {}
        for d in ds:
            by_sub.setdefault(d._sub, []).append(d.m.lease)
        for sub, leases in by_sub.items():
            self._core.settle(sub, *leases)

    async def _enqueue(self, msgs: list[wire.EnqueueMessage]) -> list[SendResult]:
        self._check()
        fut: asyncio.Future[list[SendResult]] = self._loop.create_future()
        self._acc.extend(msgs)
        self._acc_futs.append((len(msgs), fut))
        self._schedule()
        return await fut

    def _flush_enqueue(self) -> None:
        if not self._acc:
            return
        msgs, futs = self._acc, self._acc_futs
        self._acc, self._acc_futs = [], []
        f = wire.Enqueue(messages=msgs, producer_id=self._producer_id, sequence=self._sequence)
        self._sequence += len(msgs)
        try:
            req = self._core.send(f)
        except Exception as e:
            for _, fut in futs:
                if not fut.done():
                    fut.set_exception(e)
            return
        what = "enqueue " + msgs[0].queue
        inner: asyncio.Future[wire.Frame] = self._loop.create_future()
        self._calls[req] = (inner, what)

        def done(inner: asyncio.Future[wire.Frame]) -> None:
            exc = inner.exception()
            if exc is not None:
                for _, fut in futs:
                    if not fut.done():
                        fut.set_exception(exc)
                return
            res = inner.result()
            assert isinstance(res, wire.EnqueueResult)
            off = 0
            for n, fut in futs:
                out = []
                for i in range(off, off + n):
                    r = res.results[i] if i < len(res.results) else wire.EnqueueItemResult(code=wire.Code.INTERNAL)
                    err = None if r.code == 0 else error_for(r.code, r.message, op="enqueue " + msgs[i].queue)
                    out.append(SendResult(r.id, r.duplicate, err))
                off += n
                if not fut.done():
                    fut.set_result(out)
        inner.add_done_callback(done)

    async def _ack(self, ds: list[Delivery]) -> None:
        if not ds:
            return
        self._check()
        self._settle(ds)
        fut: asyncio.Future[list[FilaError | None]] = self._loop.create_future()
        self._acks.extend(ds)
        self._ack_futs.append((len(ds), fut))
        self._schedule()
        errs = await fut
        for e in errs:
            if e is not None:
                raise e

    def _flush_acks(self) -> None:
        if not self._acks:
            return
        ds, futs = self._acks, self._ack_futs
        self._acks, self._ack_futs = [], []
        try:
            req = self._core.send(wire.Ack(items=[d._ref() for d in ds]))
        except Exception as e:
            for _, fut in futs:
                if not fut.done():
                    fut.set_exception(e)
            return
        inner: asyncio.Future[wire.Frame] = self._loop.create_future()
        self._calls[req] = (inner, "ack " + ds[0].queue)

        def done(inner: asyncio.Future[wire.Frame]) -> None:
            exc = inner.exception()
            if exc is not None:
                for _, fut in futs:
                    if not fut.done():
                        fut.set_exception(exc)
                return
            res = inner.result()
            assert isinstance(res, wire.AckResult)
            off = 0
            for n, fut in futs:
                errs: list[FilaError | None] = []
                for i in range(off, off + n):
                    r = res.results[i] if i < len(res.results) else wire.ItemResult(code=wire.Code.INTERNAL)
                    errs.append(None if r.code == 0 else error_for(r.code, r.message, op=ds[i]._what("ack")))
                off += n
                if not fut.done():
                    fut.set_result(errs)
        inner.add_done_callback(done)

    # -- closing --------------------------------------------------------

    async def close(self, timeout: float = 5.0) -> None:
        """Leave gracefully: send GoAway, let requests in flight finish, wait
        (at most timeout seconds) for the broker to close, then close."""
        if self._closed:
            return
        self._closed = True
        self._flush_enqueue()
        self._flush_acks()
        c = self._core
        if not c.state.failed:
            c.close()
            self._pump()
            try:
                pending = [f for f, _ in self._calls.values()]
                if pending:
                    await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), timeout)
                await asyncio.wait_for(asyncio.shield(self._eof), timeout)
            except asyncio.TimeoutError:
                pass
        self._abort()

    def _abort(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._task.cancel()
        if not self._writer.is_closing():
            self._writer.close()
