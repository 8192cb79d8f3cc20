"""The sans-io client core of the Fila protocol: a deterministic state
machine over bytes and time, with no sockets, no tasks and no clock of its
own. It is the Python twin of the Go core (sdk/core): the handshake,
request-ID allocation and correlation, delivery routing and credit
accounting, keepalive, GoAway and redirects. The asyncio shell (client.py)
drives it; the conformance driver (fila.conformance) replays the protocol's
transcripts against it.

Usage::

    c = Conn(Config(client_name="my-app/1.0"))
    c.tick(now)                      # the shell's monotonic clock, in seconds
    req = c.send(wire.Enqueue(messages=[...]))
    while c.has_ready():
        rd = c.ready()
        write(rd.out)                # 1. write all of out, in order
        ...                          # completions, deliveries, expired, ended, redirects, state
        c.advance(rd)                # 2. then advance
    c.receive(data)                  # bytes read, in any split

The caller's obligations:

1. Call tick with the current monotonic time before receive and at or after
   every Ready's deadline; keepalive is measured only by the times given.
2. Write a Ready's out completely, in order, before calling advance (or
   queue it for a writer that drains in order).
3. A receive error (ConnError, or any exception it raises), or a Ready whose
   state is failed, is connection-scoped: close the connection. Every
   request in flight is completed with a ConnectionLost in that Ready.
4. Report each delivery the application has finished with (acked, nacked,
   retried, released) with settle(sub, lease) before sending the request
   that settles it, so the subscription's credit returns first. Settling a
   delivery whose lease expired is harmless: its credit came back with the
   broker's LeaseExpired and is not returned twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import wire
from ._errors_gen import FilaError, error_for
from .wire import ConnError, Frame


class CoreError(Exception):
    """A failure of the client itself, not reported by the broker: the
    connection was lost, timed out, or is going away."""


class ConnectionLost(CoreError):
    """Completes the requests and ends the subscriptions that were in flight
    when the connection failed; cause says why."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"fila: connection lost: {cause}")


class GoingAway(CoreError):
    """A request made after GoAway (from either side)."""

    def __init__(self) -> None:
        super().__init__("fila: connection is going away")


class KeepaliveTimeout(CoreError):
    """A Ping, or the handshake, went unanswered for the keepalive timeout."""


class TLSRequired(CoreError):
    """The broker's first bytes are a TLS record: connect with TLS."""

    def __init__(self) -> None:
        super().__init__("fila: the broker requires TLS on this port")


class VersionError(CoreError):
    """The broker chose a protocol version this client does not speak."""

    def __init__(self, server: int, lo: int, hi: int) -> None:
        super().__init__(f"fila: broker chose protocol version {server}; this client speaks {lo} to {hi}")
        self.server = server


class UnknownSubscription(CoreError):
    """An operation on a subscription the core does not have."""


class HandshakeError(CoreError):
    """The broker refused the handshake; error is its FilaError."""

    def __init__(self, error: FilaError) -> None:
        super().__init__(f"fila: handshake: {error}")
        self.error = error


def _duration(seconds: float) -> str:
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


@dataclass(slots=True)
class Config:
    """Configures a connection. The defaults are usable.

    max_frame_size is the largest frame body this side accepts, in bytes (0:
    16 MiB). keepalive_interval is how long, in seconds, the connection may
    be silent before the core sends a Ping (0: 30 s, negative: never);
    keepalive_timeout how long a Ping or the handshake may go unanswered
    (0: 10 s)."""

    client_name: str = "fila-python"
    api_key: str = ""
    capabilities: list[str] = field(default_factory=list)
    max_frame_size: int = 0
    keepalive_interval: float = 0.0
    keepalive_timeout: float = 0.0


@dataclass(slots=True)
class State:
    """The connection's state; a Ready carries it when it changed."""

    handshaken: bool = False
    version: int = 0
    node_id: str = ""
    server_name: str = ""
    capabilities: list[str] = field(default_factory=list)
    server_max_frame: int = wire.DEFAULT_MAX_FRAME_SIZE
    """The largest frame body the broker accepts, in bytes."""
    max_batch_size: int = wire.MAX_BATCH_SIZE
    """The most items the broker accepts in one batch request."""
    going_away: bool = False
    goaway_code: int = 0
    goaway_message: str = ""
    leader_hint: str = ""
    failed: bool = False
    error: BaseException | None = None


@dataclass(slots=True)
class Completion:
    """The end of a request: its response, or error (a FilaError the
    broker answered with, or a ConnectionLost)."""

    request_id: int
    op: int
    request: Frame
    response: Frame | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class DeliveryBatch:
    """Messages pushed to one subscription."""

    subscription: int
    messages: list[wire.DeliveredMessage]
    backlog: int = 0


@dataclass(slots=True)
class Expiry:
    """Deliveries whose leases ended without a settle (LeaseExpired). The
    core counted each as settled; an Ack of one gets LEASE_EXPIRED."""

    subscription: int
    leases: list[wire.ExpiredLease]


@dataclass(slots=True)
class SubscriptionEnd:
    """A subscription will receive nothing more: error is None after
    Unsubscribe, else why (a FilaError, or ConnectionLost)."""

    subscription: int
    error: BaseException | None = None


@dataclass(slots=True)
class Redirect:
    """A request answered NOT_LEADER: connect to leader_hint (when not empty)
    and send request again there. It also has a Completion."""

    request_id: int
    op: int
    request: Frame
    leader_hint: str


@dataclass(slots=True)
class Ready:
    """What the core has for the shell: bytes to write, then events.
    deadline is the monotonic time by which to tick next (0: none)."""

    out: bytes
    completions: list[Completion]
    deliveries: list[DeliveryBatch]
    expired: list[Expiry]
    ended: list[SubscriptionEnd]
    redirects: list[Redirect]
    state: State | None
    deadline: float


class _Pending:
    __slots__ = ("op", "req", "internal", "group", "part")

    def __init__(self, op: int, req: Frame, internal: bool = False, group: _Group | None = None, part: int = 0) -> None:
        self.op = op
        self.req = req
        self.internal = internal
        self.group = group
        self.part = part


class _Group:
    """A batch request split at the broker's batch cap: it completes once,
    on its first part's ID, with the parts' results joined in order."""

    __slots__ = ("id", "op", "req", "parts", "answers", "errs", "left", "reported")

    def __init__(self, id: int, op: int, req: Frame, parts: list[Frame]) -> None:
        self.id = id
        self.op = op
        self.req = req
        self.parts = parts
        self.answers: list[Frame | None] = [None] * len(parts)
        self.errs: list[FilaError | None] = [None] * len(parts)
        self.left = len(parts)
        self.reported = False


class _Sub:
    """Credit accounting of one subscription. With prefetch > 0:
    outstanding + len(held) + unreturned == prefetch + debt."""

    __slots__ = ("active", "prefetch", "asked", "outstanding", "held", "unreturned", "debt", "unsub_req")

    def __init__(self, prefetch: int) -> None:
        self.active = False
        self.prefetch = prefetch
        self.asked = prefetch
        self.outstanding = prefetch
        self.held: set[int] = set()
        self.unreturned = 0
        self.debt = 0
        self.unsub_req = 0


def _violation(reason: str) -> ConnError:
    return ConnError(wire.Code.PROTOCOL_VIOLATION, reason)


def _items(f: Frame) -> list[Any] | None:
    name = wire.BATCH_ITEMS.get(f.OPCODE)
    if name is None:
        return None
    items: list[Any] = getattr(f, name)
    return items


def _split(f: Frame, cap: int) -> list[Frame] | None:
    """f as parts of at most cap items, or None when it fits."""
    items = _items(f)
    if items is None or cap <= 0 or len(items) <= cap:
        return None
    name = wire.BATCH_ITEMS[f.OPCODE]
    parts: list[Frame] = []
    for off in range(0, len(items), cap):
        ctor: Any = type(f)
        part: Frame = ctor(**{name: items[off:off + cap]})
        if isinstance(f, wire.Enqueue) and isinstance(part, wire.Enqueue):
            part.producer_id = f.producer_id
            if f.producer_id != wire.ZERO_UUID:
                part.sequence = f.sequence + off
        parts.append(part)
    return parts


class Conn:
    """The state machine of one client connection. Not thread-safe: the
    shell owns it from one task."""

    def __init__(self, cfg: Config | None = None) -> None:
        cfg = cfg or Config()
        self.cfg = cfg
        self._max_frame = cfg.max_frame_size if cfg.max_frame_size > 0 else wire.DEFAULT_MAX_FRAME_SIZE
        self._ka_interval = cfg.keepalive_interval if cfg.keepalive_interval != 0 else 30.0
        self._ka_timeout = cfg.keepalive_timeout if cfg.keepalive_timeout > 0 else 10.0
        self._fr = wire.FrameReader(self._max_frame)
        self._now = 0.0
        self.state = State()
        self._dirty = False
        self._next_id = 1
        self._pending: dict[int, _Pending] = {}
        self._subs: dict[int, _Sub] = {}
        self._last_recv = 0.0
        self._ping_id = 0
        self._ping_sent = 0.0
        self._ping_nonce = 0
        self._hs_deadline = 0.0
        self._armed = False
        self._held: list[int] = []
        self._held_away = False
        self._bytes_in = 0
        self.unknown_frames = 0
        """Frames with opcodes this version does not know; they are ignored."""
        self._out = bytearray()
        self._completions: list[Completion] = []
        self._deliveries: list[DeliveryBatch] = []
        self._expired: list[Expiry] = []
        self._ended: list[SubscriptionEnd] = []
        self._redirects: list[Redirect] = []
        hs = wire.Handshake(
            max_version=wire.PROTOCOL_VERSION,
            min_version=wire.MIN_PROTOCOL_VERSION,
            capabilities=list(cfg.capabilities),
            api_key=cfg.api_key,
            client_name=cfg.client_name,
            max_frame_size=self._max_frame,
        )
        self._hs_id = self._alloc_id()
        self._pending[self._hs_id] = _Pending(hs.OPCODE, hs, internal=True)
        self._write(self._hs_id, hs)

    # -- requests -------------------------------------------------------

    def _alloc_id(self) -> int:
        while True:
            id = self._next_id
            self._next_id = self._next_id + 1 if self._next_id < 0xFFFFFFFF else 1
            if id not in self._pending and id not in self._subs:
                return id

    def _write(self, req_id: int, f: Frame) -> None:
        wire.encode_frame(req_id, f, self.state.server_max_frame, self._out)

    def _usable(self) -> None:
        if self.state.failed:
            assert self.state.error is not None
            raise self.state.error
        if self.state.going_away:
            raise GoingAway()

    def in_flight(self) -> int:
        """Requests awaiting a response, not counting subscriptions."""
        return len(self._pending)

    def send(self, f: Frame) -> int:
        """Queue a request and return its request ID; its Completion comes
        in a later Ready. Subscribe and Unsubscribe go through their own
        methods. Raises ValueError for a frame that is not a request,
        GoingAway after GoAway, the failure after the connection failed.

        Requests made before HandshakeOk are written once it arrives. A
        batch request with more items than the broker accepts is sent as
        several requests and completes once, on the returned ID."""
        self._usable()
        if f.KIND != "request":
            raise ValueError(f"fila: not a request frame: {f.NAME}")
        if isinstance(f, (wire.Subscribe, wire.Unsubscribe, wire.Handshake)):
            raise ValueError(f"fila: send {f.NAME}: use its own method")
        id = self._alloc_id()
        p = _Pending(f.OPCODE, f)
        self._pending[id] = p
        self._transmit(id, p)
        return id

    def _transmit(self, id: int, p: _Pending) -> None:
        if not self.state.handshaken:
            self._held.append(id)
            return
        parts = _split(p.req, self.state.max_batch_size)
        if parts is None:
            self._write(id, p.req)
            return
        g = _Group(id, p.op, p.req, parts)
        for k, part in enumerate(parts):
            pid = id if k == 0 else self._alloc_id()
            self._pending[pid] = _Pending(p.op, part, group=g, part=k)
            self._write(pid, part)

    def _release(self) -> None:
        held, self._held = self._held, []
        for id in held:
            p = self._pending.get(id)
            if p is not None:
                self._transmit(id, p)
        if self._held_away:
            self._held_away = False
            self._write(0, wire.GoAway(code=0, message="client closing"))

    def subscribe(self, queue: str, prefetch: int, rate_limits: list[wire.RateLimit] | None = None, **fields: Any) -> int:
        """Queue a Subscribe and return the subscription's ID (its request
        ID). prefetch is the most deliveries the application holds
        unsettled; 0 asks for the broker's cap. Other keywords name fields
        of the Subscribe frame (such as lease_timeout_ms). Deliveries
        follow in DeliveryBatches with this ID."""
        self._usable()
        s = _Sub(prefetch)
        f = wire.Subscribe(queue=queue, prefetch=prefetch, rate_limits=list(rate_limits or []))
        for k, v in fields.items():
            if not hasattr(f, k):
                raise TypeError(f"fila: Subscribe has no field {k!r}")
            setattr(f, k, v)
        id = self._alloc_id()
        p = _Pending(f.OPCODE, f)
        self._pending[id] = p
        self._subs[id] = s
        self._transmit(id, p)
        return id

    def unsubscribe(self, sub: int) -> int:
        """Queue an Unsubscribe of sub; its SubscriptionEnd comes with its
        Completion. Raises UnknownSubscription."""
        self._usable()
        s = self._subs.get(sub)
        if s is None or not s.active:
            raise UnknownSubscription(f"fila: unknown subscription: {sub}")
        f = wire.Unsubscribe(subscription=sub)
        id = self._alloc_id()
        self._pending[id] = _Pending(f.OPCODE, f)
        s.unsub_req = id
        self._write(id, f)
        return id

    def settle(self, sub: int, *leases: int) -> None:
        """Report deliveries of sub the application has finished with, so
        their credit returns to the broker, in Credit frames of at least a
        quarter of the prefetch. A lease not held (settled before, expired,
        never delivered) returns nothing. Call it before sending the
        request that settles them."""
        s = self._subs.get(sub)
        if s is None:
            return
        n = 0
        for lease in leases:
            if lease in s.held:
                s.held.discard(lease)
                n += 1
        if n == 0 or s.prefetch == 0:
            return
        s.unreturned += n
        pay = min(s.debt, s.unreturned)
        s.debt -= pay
        s.unreturned -= pay
        if s.unreturned >= max(1, s.prefetch // 4) and s.active and s.unsub_req == 0 and not (self.state.failed or self.state.going_away):
            self._grant(sub, s, s.unreturned)
            s.unreturned = 0

    def _grant(self, id: int, s: _Sub, n: int) -> None:
        s.outstanding += n
        self._write(0, wire.Credit(subscription=id, credits=n))

    def credit(self, sub: int) -> tuple[int, int] | None:
        """sub's (outstanding credit, deliveries held unsettled), or None."""
        s = self._subs.get(sub)
        if s is None:
            return None
        return s.outstanding, len(s.held)

    def close(self) -> None:
        """Queue a GoAway: no new requests; the shell closes the connection
        once in_flight() is 0."""
        if self.state.failed or self.state.going_away:
            return
        self.state.going_away = True
        self._dirty = True
        if not self.state.handshaken:
            self._held_away = True
            return
        self._write(0, wire.GoAway(code=0, message="client closing"))

    # -- time -----------------------------------------------------------

    def tick(self, now: float) -> None:
        """Tell the core the monotonic time, in seconds. It sends keepalive
        Pings and fails the connection when one, or the handshake, goes
        unanswered too long."""
        self._now = now
        if not self._armed:
            self._armed = True
            self._last_recv = now
            self._hs_deadline = now + self._ka_timeout
        if self.state.failed:
            return
        if not self.state.handshaken:
            if now >= self._hs_deadline:
                self._fail(KeepaliveTimeout(f"fila: keepalive timeout: no handshake answer in {_duration(self._ka_timeout)}"))
            return
        if self._ka_interval < 0:
            return
        if self._ping_id:
            if now - self._ping_sent >= self._ka_timeout:
                self._fail(KeepaliveTimeout(f"fila: keepalive timeout: no pong in {_duration(self._ka_timeout)}"))
            return
        if now - self._last_recv >= self._ka_interval:
            self._ping_nonce += 1
            p = wire.Ping(nonce=self._ping_nonce)
            self._ping_id = self._alloc_id()
            self._ping_sent = now
            self._pending[self._ping_id] = _Pending(p.OPCODE, p, internal=True)
            self._write(self._ping_id, p)

    def deadline(self) -> float:
        """When the shell must tick next (monotonic seconds); 0: none."""
        return self._deadline()

    def _deadline(self) -> float:
        if self.state.failed or not self._armed:
            return 0.0
        if not self.state.handshaken:
            return self._hs_deadline
        if self._ka_interval < 0:
            return 0.0
        if self._ping_id:
            return self._ping_sent + self._ka_timeout
        return self._last_recv + self._ka_interval

    # -- input ----------------------------------------------------------

    def receive(self, data: bytes) -> None:
        """Feed bytes read from the connection, in any split. An exception
        is connection-scoped (usually a ConnError): the connection has
        failed; the failure is also in the next Ready."""
        if self.state.failed:
            assert self.state.error is not None
            raise self.state.error
        if not data:
            return
        if self._bytes_in == 0 and data[0] in (0x15, 0x16) and (len(data) < 2 or data[1] == 0x03):
            err = TLSRequired()
            self._fail(err)
            raise err
        self._bytes_in += len(data)
        self._last_recv = self._now
        self._fr.feed(data)
        while True:
            try:
                nf = self._fr.next()
                if nf is None:
                    return
                self._handle(nf[0], nf[1])
            except ConnError as e:
                self._fail(e)
                raise

    def _handle(self, h: wire.Header, body: bytes) -> None:
        op = h.opcode
        try:
            f = wire.decode_body(op, body)
        except wire.DecodeError as e:
            raise ConnError(wire.Code.MALFORMED_FRAME, str(e)) from None
        if f is None:
            self.unknown_frames += 1
            return
        if isinstance(f, wire.Ping):
            self._write(h.request_id, wire.Pong(nonce=f.nonce))
            return
        if isinstance(f, wire.GoAway):
            st = self.state
            st.going_away = True
            st.goaway_code, st.goaway_message, st.leader_hint = f.code, f.message, f.leader_hint
            self._dirty = True
            return
        if isinstance(f, wire.Delivery):
            self._deliver(h.request_id, f)
            return
        if isinstance(f, wire.LeaseExpired):
            self._lease_expired(h.request_id, f)
            return
        if f.KIND in ("request", "oneway"):
            raise _violation(f"client-bound frame {f.NAME} is a request")
        if f.KIND == "push":
            raise _violation(f"unexpected push {f.NAME}")
        p = self._pending.get(h.request_id)
        if p is None:
            if isinstance(f, wire.ErrorFrame):
                if h.request_id == 0:
                    raise ConnError(f.code, f.message)
                s = self._subs.get(h.request_id)
                if s is not None and s.active:
                    del self._subs[h.request_id]
                    self._ended.append(SubscriptionEnd(h.request_id, self._error(f, "")))
                    return
            raise _violation(f"{f.NAME} for request {h.request_id}, which is not in flight")
        del self._pending[h.request_id]
        is_err = isinstance(f, wire.ErrorFrame)
        if not is_err and op != wire.RESPONSES.get(p.op):
            raise _violation(f"{f.NAME} answers {wire.frame_name(p.op)} request {h.request_id}; "
                             f"want {wire.frame_name(wire.RESPONSES.get(p.op, 0))}")
        g = p.group
        if g is not None:
            if isinstance(f, wire.ErrorFrame):
                g.errs[p.part] = self._error(f, g.req.NAME)
            else:
                g.answers[p.part] = f
            g.left -= 1
            if g.left == 0:
                self._group_done(g)
            return
        if isinstance(f, wire.ErrorFrame):
            self._failed(h.request_id, p, f)
        else:
            self._succeeded(h.request_id, p, f)

    @staticmethod
    def _error(f: wire.ErrorFrame, op: str) -> FilaError:
        return error_for(f.code, f.message, leader_hint=f.leader_hint)

    def _group_done(self, g: _Group) -> None:
        g.reported = True
        if all(e is not None for e in g.errs):
            first = g.errs[0]
            assert first is not None
            if first.code == wire.Code.NOT_LEADER:
                self._redirects.append(Redirect(g.id, g.op, g.req, first.leader_hint))
            self._completions.append(Completion(g.id, g.op, g.req, error=first))
            return
        field_name, item_cls = wire.ITEM_RESULTS[g.op]
        results: list[Any] = []
        for k, part in enumerate(g.parts):
            e = g.errs[k]
            if e is not None:
                n = len(_items(part) or [])
                results.extend(item_cls(code=e.code, message=e.message) for _ in range(n))
                continue
            results.extend(getattr(g.answers[k], field_name))
        resp: Frame = wire.FRAMES[wire.RESPONSES[g.op]](**{field_name: results})
        self._completions.append(Completion(g.id, g.op, g.req, response=resp))

    def _failed(self, id: int, p: _Pending, f: wire.ErrorFrame) -> None:
        err = self._error(f, p.req.NAME)
        if isinstance(p.req, wire.Handshake):
            self._fail(HandshakeError(err))
            return
        if isinstance(p.req, wire.Ping) and p.internal:
            self._ping_id = 0
            return
        if isinstance(p.req, wire.Subscribe):
            self._subs.pop(id, None)
        elif isinstance(p.req, wire.Unsubscribe):
            s = self._subs.get(p.req.subscription)
            if s is not None:
                s.unsub_req = 0
        if f.code == wire.Code.NOT_LEADER:
            self._redirects.append(Redirect(id, p.op, p.req, f.leader_hint))
        self._completions.append(Completion(id, p.op, p.req, error=err))

    def _succeeded(self, id: int, p: _Pending, f: Frame) -> None:
        if isinstance(f, wire.HandshakeOk):
            if f.version < wire.MIN_PROTOCOL_VERSION or f.version > wire.PROTOCOL_VERSION:
                self._fail(VersionError(f.version, wire.MIN_PROTOCOL_VERSION, wire.PROTOCOL_VERSION))
                return
            st = self.state
            st.handshaken = True
            st.version, st.node_id, st.server_name = f.version, f.node_id, f.server_name
            st.capabilities = list(f.capabilities)
            if f.max_frame_size >= wire.MIN_MAX_FRAME_SIZE:
                st.server_max_frame = f.max_frame_size
            if f.max_batch_size > 0:
                st.max_batch_size = min(f.max_batch_size, wire.MAX_BATCH_SIZE)
            self._dirty = True
            self._release()
            return
        if isinstance(f, wire.Pong) and p.internal:
            self._ping_id = 0
            return
        if isinstance(f, wire.SubscribeOk):
            s = self._subs[id]
            if s.asked > 0 and (f.prefetch == 0 or f.prefetch > s.asked):
                raise _violation(f"SubscribeOk grants prefetch {f.prefetch} to subscription {id}, which asked for {s.asked}")
            s.active = True
            if f.prefetch != s.asked:
                if s.asked == 0:
                    s.prefetch = f.prefetch + len(s.held)
                    s.outstanding = f.prefetch
                else:
                    cut = s.asked - f.prefetch
                    s.prefetch -= cut
                    s.outstanding -= cut
        elif isinstance(f, wire.UnsubscribeOk):
            assert isinstance(p.req, wire.Unsubscribe)
            sub = p.req.subscription
            self._subs.pop(sub, None)
            self._ended.append(SubscriptionEnd(sub))
        self._completions.append(Completion(id, p.op, p.req, response=f))

    def _deliver(self, sub: int, d: wire.Delivery) -> None:
        s = self._subs.get(sub)
        if s is None or not s.active:
            raise _violation(f"delivery for subscription {sub}, which is not open")
        n = len(d.messages)
        if s.prefetch > 0 and n > s.outstanding:
            raise _violation(f"delivery of {n} messages to subscription {sub} exceeds its credit {s.outstanding}")
        for m in d.messages:
            if m.lease in s.held:
                raise _violation(f"delivery to subscription {sub} reuses lease {m.lease}, which it holds")
            s.held.add(m.lease)
        if s.prefetch > 0:
            s.outstanding -= n
        self._deliveries.append(DeliveryBatch(sub, d.messages, d.backlog))

    def _lease_expired(self, sub: int, f: wire.LeaseExpired) -> None:
        s = self._subs.get(sub)
        if s is None or not s.active:
            raise _violation(f"LeaseExpired for subscription {sub}, which is not open")
        for lease in f.leases:
            held = lease.lease in s.held
            s.held.discard(lease.lease)
            if s.prefetch == 0:
                continue
            s.outstanding += 1
            if not held:
                # Settled before the expiry reached us: its credit came back
                # twice; keep one from being returned.
                if s.unreturned > 0:
                    s.unreturned -= 1
                else:
                    s.debt += 1
        self._expired.append(Expiry(sub, f.leases))

    def lost(self, err: BaseException) -> None:
        """The connection was lost (EOF, a read or write error): fail it."""
        self._fail(err)

    def _fail(self, err: BaseException) -> None:
        if self.state.failed:
            return
        self.state.failed = True
        self.state.error = err
        self._dirty = True
        lost = ConnectionLost(err)
        for id in sorted(self._pending):
            p = self._pending[id]
            if p.internal:
                continue
            g = p.group
            if g is not None:
                if not g.reported:
                    g.reported = True
                    self._completions.append(Completion(g.id, g.op, g.req, error=lost))
                continue
            self._completions.append(Completion(id, p.op, p.req, error=lost))
        self._pending.clear()
        self._held, self._held_away = [], False
        for id in sorted(self._subs):
            if self._subs[id].active:
                self._ended.append(SubscriptionEnd(id, lost))
        self._subs.clear()

    # -- output ---------------------------------------------------------

    def has_ready(self) -> bool:
        """Whether ready() has anything for the shell."""
        return bool(self._out or self._completions or self._deliveries or self._expired
                    or self._ended or self._redirects or self._dirty)

    def ready(self) -> Ready:
        """What the core has for the shell; then call advance."""
        return Ready(
            out=bytes(self._out),
            completions=list(self._completions),
            deliveries=list(self._deliveries),
            expired=list(self._expired),
            ended=list(self._ended),
            redirects=list(self._redirects),
            state=_copy_state(self.state) if self._dirty else None,
            deadline=self._deadline(),
        )

    def take_out(self) -> bytes:
        """The bytes to write, taken at once (a shell that writes as soon as
        requests are made uses it between Readys)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def advance(self, rd: Ready) -> None:
        """Acknowledge rd: its bytes were written and its events handled."""
        if rd.out:
            del self._out[:len(rd.out)]
        del self._completions[:len(rd.completions)]
        del self._deliveries[:len(rd.deliveries)]
        del self._expired[:len(rd.expired)]
        del self._ended[:len(rd.ended)]
        del self._redirects[:len(rd.redirects)]
        if rd.state is not None:
            self._dirty = False


def _copy_state(st: State) -> State:
    return State(st.handshaken, st.version, st.node_id, st.server_name, list(st.capabilities),
                 st.server_max_frame, st.max_batch_size, st.going_away, st.goaway_code,
                 st.goaway_message, st.leader_hint, st.failed, st.error)
