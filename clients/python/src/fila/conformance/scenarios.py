"""The conformance scenarios, ported from the Go reference drivers
(conformance/scenario): each drives the Python client through one
connection, one call after another, doing what its transcript's client
did. `fila-conformance client -exec 'python3 -m fila.conformance client'`
runs each against the fake broker, which checks every byte; against a live
broker each must succeed (live-broker mode).

A scenario returns normally when every step got what it wanted; a step
that did not raises ScenarioError, and the program exits 1.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from .. import (
    ApiKeyNotFoundError, Client, CoreError, Delivery, FilaError, ForbiddenError, InternalError, InvalidArgumentError,
    InvalidConfigValueError, LeaseExpiredError, Message, MessageNotFoundError, MessageTooLargeError, NotADlqError,
    NotSupportedError, QueueExistsError, QueueNotFoundError, ResourceExhaustedError, ScriptErrorError, Subscription,
    UnauthorizedError, UnavailableError, wire,
)
from . import SKIP

T = TypeVar("T")

WAIT = 15.0
"""Seconds a scenario waits for any one delivery or end."""

BOOTSTRAP_KEY = "conformance-bootstrap-key"
"""The bootstrap API key of the brokers the transcripts started with auth on."""


class ScenarioError(Exception):
    """A step did not get what it wanted."""


Scenario = Callable[[str], Coroutine[Any, Any, None]]
SCENARIOS: dict[str, Scenario] = {}
"""Every scenario, by its transcript's name."""


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    """Register a scenario under name."""
    def reg(f: Scenario) -> Scenario:
        SCENARIOS[name] = f
        return f
    return reg


class Steps:
    """Collects the failures of a scenario's steps, going on after each."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    async def want(self, step: str, call: Awaitable[T], error: type[BaseException] | None = None) -> T | None:
        """Await call; it must succeed (error None) or raise error."""
        try:
            v = await call
        except Exception as e:
            if error is None or not isinstance(e, error):
                self.errors.append(f"{step}: got {type(e).__name__}: {e}; want {error.__name__ if error else 'success'}")
            return None
        if error is not None:
            self.errors.append(f"{step}: succeeded; want {error.__name__}")
        return v

    def check(self, step: str, ok: bool, detail: str) -> None:
        """Record a failed check."""
        if not ok:
            self.errors.append(f"{step}: {detail}")

    def done(self) -> None:
        """Raise ScenarioError if any step failed."""
        if self.errors:
            raise ScenarioError("; ".join(self.errors))


async def connect(addr: str, **kw: Any) -> Client:
    """A client for one transcript's connection."""
    return await Client.connect(addr, **kw)


async def nxt(sub: Subscription) -> Delivery:
    """sub's next delivery."""
    try:
        return await sub.next(WAIT)
    except StopAsyncIteration:
        raise ScenarioError(f"subscription to {sub.queue} ended") from None


async def one_call(addr: str, error: type[BaseException] | None, call: Callable[[Client], Awaitable[Any]]) -> None:
    """Connect, make one call that must fail with error (or succeed), close."""
    c = await connect(addr)
    st = Steps()
    await st.want("call", call(c), error)
    await st.want("close", c.close())
    st.done()


# ---- session ----

@scenario("session/connect_ping_close")
async def connect_ping_close(addr: str) -> None:
    c = await connect(addr)
    await c.ping()
    await c.close()


# ---- admin ----

@scenario("admin/queue_lifecycle")
async def queue_lifecycle(addr: str) -> None:
    c = await connect(addr)
    a, q, st = c.admin, "adm.lifecycle", Steps()
    await st.want("create", a.create_queue(q, visibility_timeout=45, max_attempts=5))
    await st.want("create again", a.create_queue(q), QueueExistsError)
    qs = await st.want("list", a.list_queues())
    st.check("list", qs is not None and len(qs) == 2, f"got {qs}; want the queue and its DLQ")
    await st.want("stats", a.queue_stats(q))
    await st.want("send", c.producer.send(Message(q, b"hello", fairness_key="acme", weight=2)))
    await st.want("stats after send", a.queue_stats(q))
    await st.want("delete", a.delete_queue(q))
    await st.want("delete again", a.delete_queue(q), QueueNotFoundError)
    await st.want("stats after delete", a.queue_stats(q), QueueNotFoundError)
    await st.want("close", c.close())
    st.done()


@scenario("admin/tenants")
async def tenants(addr: str) -> None:
    c = await connect(addr)
    a, q, st = c.admin, "adm.tenants", Steps()
    await st.want("create", a.create_queue(q, tenant_separator="/", cost_by_time=True))
    for k in ("acme/a", "acme/b", "acme/a", "solo"):
        await st.want("send " + k, c.producer.send(Message(q, b"x", fairness_key=k)))
    qs = await st.want("stats", a.queue_stats(q))
    if qs is not None:
        shares = {k.key: k.entitled_share for k in qs.fairness_keys}
        st.check("stats", qs.policy == "stfq" and qs.tenant_separator == "/" and qs.cost_by_time
                 and shares.get("acme/a") == 0.25 and shares.get("acme/b") == 0.25 and shares.get("solo") == 0.5,
                 f"got policy {qs.policy!r}, separator {qs.tenant_separator!r}, shares {shares}")
    await st.want("delete", a.delete_queue(q))
    await st.want("close", c.close())
    st.done()


@scenario("admin/explain")
async def explain(addr: str) -> None:
    c = await connect(addr)
    a, q, st = c.admin, "adm.explain", Steps()
    await st.want("create", a.create_queue(q))
    id1 = await st.want("send first", c.producer.send(Message(q, b"a", fairness_key="acme")))
    id2 = await st.want("send second", c.producer.send(Message(q, b"b", fairness_key="acme")))
    assert id1 is not None and id2 is not None
    e = await st.want("explain first", a.explain(q, id1))
    st.check("explain first", e is not None and e.reason == "no-credit", f"got {e}; want no-credit")
    e = await st.want("explain second", a.explain(q, id2))
    st.check("explain second", e is not None and e.reason == "behind-key" and e.ahead == 1, f"got {e}; want behind-key, 1 ahead")
    await st.want("explain unknown", a.explain(q, b"\x01" + bytes(15)), MessageNotFoundError)
    await st.want("explain no queue", a.explain("adm.explain.none", id1), QueueNotFoundError)
    await st.want("delete", a.delete_queue(q))
    await st.want("close", c.close())
    st.done()


@scenario("admin/create_queue_errors")
async def create_queue_errors(addr: str) -> None:
    c = await connect(addr)
    a, st = c.admin, Steps()
    await st.want("bad name", a.create_queue("adm bad name"), InvalidArgumentError)
    await st.want("dlq name", a.create_queue("adm.errors.dlq"), InvalidArgumentError)
    await st.want("bad script", a.create_queue("adm.errors", on_enqueue="function on_enqueue(msg)\n  return {\nend"), ScriptErrorError)
    await st.want("separator on drr", a.create_queue("adm.errors", policy="drr", tenant_separator="/"), InvalidArgumentError)
    await st.want("close", c.close())
    st.done()


@scenario("admin/runtime_config")
async def runtime_config(addr: str) -> None:
    c = await connect(addr)
    a, st = c.admin, Steps()
    await st.want("set", a.set_config("throttle.adm.cfg.stripe", "10,20"))
    await st.want("set other", a.set_config("adm.cfg.region", "eu"))
    v = await st.want("get", a.get_config("throttle.adm.cfg.stripe"))
    st.check("get", v == "10,20", f"got {v!r}")
    es = await st.want("list", a.list_config("throttle.adm.cfg."))
    st.check("list", es is not None and len(es) == 1, f"got {es}")
    await st.want("set bad throttle", a.set_config("throttle.adm.cfg.stripe", "fast"), InvalidConfigValueError)
    existed = await st.want("delete", a.delete_config("throttle.adm.cfg.stripe"))
    st.check("delete", existed is True, "existed = false")
    existed = await st.want("delete again", a.delete_config("throttle.adm.cfg.stripe"))
    st.check("delete again", existed is False, "existed = true")
    v = await st.want("get deleted", a.get_config("throttle.adm.cfg.stripe"))
    st.check("get deleted", v is None, f"found {v!r}")
    await st.want("close", c.close())
    st.done()


@scenario("admin/api_keys")
async def api_keys(addr: str) -> None:
    c = await connect(addr)
    a, st = c.admin, Steps()
    key = await st.want("create key", a.create_api_key("ci", [wire.Permission(kind=wire.PermissionKind.PRODUCE, pattern="orders.*")]))
    ks = await st.want("list keys", a.list_api_keys())
    st.check("list keys", ks is not None and len(ks) == 1, f"got {ks}")
    key_id = key.key_id if key is not None else ""
    await st.want("set acl", a.set_acl(key_id, [wire.Permission(kind=wire.PermissionKind.CONSUME, pattern="orders.eu"),
                                                wire.Permission(kind=wire.PermissionKind.ADMIN, pattern="orders.eu")]))
    await st.want("get acl", a.get_acl(key_id))
    await st.want("revoke", a.revoke_api_key(key_id))
    await st.want("revoke again", a.revoke_api_key(key_id), ApiKeyNotFoundError)
    await st.want("get acl of a revoked key", a.get_acl(key_id), ApiKeyNotFoundError)
    await st.want("close", c.close())
    st.done()


@scenario("admin/cluster_status")
async def cluster_status(addr: str) -> None:
    c = await connect(addr)
    st = Steps()
    cs = await st.want("cluster status", c.admin.cluster_status())
    st.check("cluster status", cs is None or (cs.node_id == 0 and not cs.nodes and not cs.groups), f"got {cs}")
    await st.want("close", c.close())
    st.done()


@scenario("admin/move_queue")
async def move_queue(addr: str) -> None:
    c = await connect(addr)
    st = Steps()
    await st.want("move queue", c.admin.call(wire.MoveQueue(queue="adm.move", replicas=[2, 3, 4])), NotSupportedError)
    await st.want("close", c.close())
    st.done()


@scenario("admin/drain_node")
async def drain_node(addr: str) -> None:
    c = await connect(addr)
    st = Steps()
    await st.want("drain node", c.admin.call(wire.DrainNode(node_id=2)), NotSupportedError)
    await st.want("undrain node", c.admin.call(wire.DrainNode(node_id=2, undo=True)), NotSupportedError)
    await st.want("close", c.close())
    st.done()


@scenario("admin/membership")
async def membership(addr: str) -> None:
    c = await connect(addr)
    a, st = c.admin, Steps()
    await st.want("rebalance dry run", a.call(wire.Rebalance(dry_run=True)), NotSupportedError)
    await st.want("rebalance", a.call(wire.Rebalance()), NotSupportedError)
    await st.want("add node", a.call(wire.AddNode(node_id=4, peer_addr="10.0.0.4:5556")), NotSupportedError)
    await st.want("remove node", a.call(wire.RemoveNode(node_id=3)), NotSupportedError)
    await st.want("close", c.close())
    st.done()


@scenario("admin/redrive")
async def redrive(addr: str) -> None:
    c = await connect(addr)
    a, q, st = c.admin, "adm.redrive", Steps()
    await st.want("create", a.create_queue(q, max_attempts=1))
    await st.want("send", c.producer.enqueue(q, b"job"))
    sub = await c.consumer.subscribe(q, prefetch=1)
    d = await nxt(sub)
    await st.want("nack", d.nack("boom"))
    n = await st.want("redrive", a.redrive(q + ".dlq"))
    st.check("redrive", n == 1, f"moved {n}")
    d = await nxt(sub)
    st.check("redelivery", d.attempt == 1, f"attempt {d.attempt}")
    await st.want("ack", d.ack())
    await st.want("redrive a queue", a.redrive(q), NotADlqError)
    await st.want("redrive a missing dlq", a.redrive("adm.no-such-queue.dlq"), QueueNotFoundError)
    await st.want("unsubscribe", sub.close())
    await st.want("close", c.close())
    st.done()


@scenario("admin/delete_queue_ends_subscription")
async def delete_queue_ends_subscription(addr: str) -> None:
    c = await connect(addr)
    a, q, st = c.admin, "adm.delete-sub", Steps()
    await st.want("create", a.create_queue(q))
    sub = await c.consumer.subscribe(q, prefetch=4)
    await st.want("delete", a.delete_queue(q))
    err = await sub.wait_ended(WAIT)
    st.check("subscription end", isinstance(err, QueueNotFoundError), f"ended with {err!r}; want QueueNotFoundError")
    await st.want("close", c.close())
    st.done()


@scenario("admin/purge_peek")
async def purge_peek(addr: str) -> None:
    c = await connect(addr)
    a, q, st = c.admin, "adm.purge", Steps()
    await st.want("create", a.create_queue(q))
    for p in (b"one", b"two", b"three"):
        await st.want("send", c.producer.enqueue(q, p))
    sub = await c.consumer.subscribe(q, prefetch=1, lease_timeout_ms=3600_000)
    d = await nxt(sub)
    page = await st.want("peek", a.call(wire.Peek(queue=q, count=2)))
    if isinstance(page, wire.PeekResult):
        ms = page.messages
        st.check("peek", len(ms) == 2 and page.next_after == ms[1].id and ms[0].state == "leased" and ms[1].preview == b"two",
                 f"page {page}")
        page = await st.want("peek after", a.call(wire.Peek(queue=q, count=2, after=page.next_after)))
        st.check("peek after", isinstance(page, wire.PeekResult) and len(page.messages) == 1
                 and page.next_after == wire.ZERO_UUID, f"page {page}")
    n = await st.want("purge", a.call(wire.PurgeQueue(name=q)))
    st.check("purge", isinstance(n, wire.PurgeQueueResult) and n.purged == 2, f"purged {n}")
    page = await st.want("peek purged", a.call(wire.Peek(queue=q)))
    st.check("peek purged", isinstance(page, wire.PeekResult) and len(page.messages) == 1 and page.messages[0].id == d.id,
             f"page {page}")
    await st.want("ack", d.ack())
    await st.want("purge a missing queue", a.call(wire.PurgeQueue(name="adm.no-such-queue")), QueueNotFoundError)
    await st.want("peek a missing queue", a.call(wire.Peek(queue="adm.no-such-queue")), QueueNotFoundError)
    await st.want("unsubscribe", sub.close())
    await st.want("close", c.close())
    st.done()


@scenario("admin/redrive_throttled")
async def redrive_throttled(addr: str) -> None:
    c = await connect(addr)
    a, q, st = c.admin, "adm.redrive-rate", Steps()
    await st.want("create", a.create_queue(q, max_attempts=1))
    for k in ("a", "b", "a"):
        await st.want("send", c.producer.send(Message(q, k.encode(), fairness_key=k)))
    sub = await c.consumer.subscribe(q, prefetch=3)
    for _ in range(3):
        d = await nxt(sub)
        await st.want("nack", d.nack("boom"))
    r = await st.want("redrive", a.call(wire.Redrive(dead_letter_queue=q + ".dlq", rate=1, fairness_key="a")))
    st.check("redrive", isinstance(r, wire.RedriveResult) and r.moved == 1 and r.pending == 1, f"status {r}")
    r = await st.want("cancel", a.call(wire.Redrive(dead_letter_queue=q + ".dlq", cancel=True)))
    st.check("cancel", isinstance(r, wire.RedriveResult) and r.moved + r.pending == 2, f"status {r}")
    await st.want("unsubscribe", sub.close())
    await st.want("close", c.close())
    st.done()


# ---- auth ----

@scenario("auth/unauthorized")
async def unauthorized(addr: str) -> None:
    st = Steps()
    await st.want("connect", connect(addr, api_key="not-a-key"), UnauthorizedError)
    st.done()


@scenario("auth/bootstrap_key")
async def bootstrap_key(addr: str) -> None:
    c = await connect(addr, api_key=BOOTSTRAP_KEY)
    st = Steps()
    await st.want("create", c.admin.create_queue("au.bootstrap"))
    await st.want("send", c.producer.enqueue("au.bootstrap", b"signed"))
    await st.want("close", c.close())
    st.done()


# ---- hot path ----

@scenario("hotpath/enqueue_consume")
async def enqueue_consume(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.enqueue-consume", Steps()
    await st.want("create", c.admin.create_queue(q))
    id = await st.want("send", c.producer.send(Message(q, b"hello", headers={"tenant": "acme"}, fairness_key="acme", weight=3)))
    sub = await c.consumer.subscribe(q, prefetch=1)
    d = await nxt(sub)
    st.check("delivery", d.id == id and d.payload == b"hello" and d.headers.get("tenant") == "acme" and d.attempt == 1,
             f"got {d.uuid} {d.payload!r} attempt {d.attempt}")
    await st.want("ack", d.ack())
    await st.want("unsubscribe", sub.close())
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/enqueue_batch_partial")
async def enqueue_batch_partial(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.batch-partial", Steps()
    await st.want("create", c.admin.create_queue(q))
    rs = await st.want("send batch", c.producer.send_batch([
        Message(q, b"one"),
        Message("hp.no-such-queue", b"two"),
        Message(q, b"three").header("fila-attempts", "9"),
        Message(q, b"four"),
    ]))
    if rs is not None:
        want: list[type[FilaError] | None] = [None, QueueNotFoundError, InvalidArgumentError, None]
        for i, (r, w) in enumerate(zip(rs, want)):
            st.check(f"result {i}", (r.error is None) if w is None else isinstance(r.error, w), f"got {r.error!r}")
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/message_too_large")
async def message_too_large(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.too-large", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.enqueue(q, b"x" * 9000), MessageTooLargeError)
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/continuation")
async def continuation(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.continuation", Steps()
    await st.want("create", c.admin.create_queue(q))
    payload = b"0123456789" * 600
    await st.want("send", c.producer.enqueue(q, payload))
    sub = await c.consumer.subscribe(q, prefetch=1)
    d = await nxt(sub)
    st.check("delivery", d.payload == payload, f"payload of {len(d.payload)} bytes")
    await st.want("ack", d.ack())
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/ack_twice")
async def ack_twice(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.ack-twice", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.enqueue(q, b"once"))
    sub = await c.consumer.subscribe(q, prefetch=2)
    d = await nxt(sub)
    await st.want("ack", d.ack())
    await st.want("ack again", d.ack(), MessageNotFoundError)
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/ack_batch_partial")
async def ack_batch_partial(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.ack-batch", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.send_batch([Message(q, b"a"), Message(q, b"b")]))
    sub = await c.consumer.subscribe(q, prefetch=2)
    d1 = await nxt(sub)
    d2 = await nxt(sub)
    await st.want("ack first", d1.ack())
    await st.want("ack both", c.consumer.ack_all([d1, d2]), MessageNotFoundError)
    await st.want("close", c.close())
    st.done()


async def _settle_then_again(addr: str, q: str, settle: Callable[[Delivery], Awaitable[None]], attempt: int,
                             **create: Any) -> None:
    c = await connect(addr)
    st = Steps()
    await st.want("create", c.admin.create_queue(q, **create))
    await st.want("send", c.producer.enqueue(q, b"job"))
    sub = await c.consumer.subscribe(q, prefetch=1)
    d = await nxt(sub)
    await st.want("settle", settle(d))
    d = await nxt(sub)
    st.check("redelivery", d.attempt == attempt, f"attempt {d.attempt}")
    await st.want("ack", d.ack())
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/nack_retry")
async def nack_retry(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.nack-retry", Steps()
    await st.want("create", c.admin.create_queue(q, backoff=(0.01, 0.01)))
    await st.want("send", c.producer.enqueue(q, b"flaky"))
    sub = await c.consumer.subscribe(q, prefetch=1)
    d = await nxt(sub)
    await st.want("nack", d.nack("downstream timeout"))
    d = await nxt(sub)
    st.check("redelivery", d.attempt == 2, f"attempt {d.attempt}")
    await st.want("ack", d.ack())
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/retry_after")
async def retry_after(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.retry-after", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.enqueue(q, b"rate limited"))
    sub = await c.consumer.subscribe(q, prefetch=1)
    d = await nxt(sub)
    await st.want("retry after", d.retry_after(0.05))
    d = await nxt(sub)
    st.check("redelivery", d.attempt == 2, f"attempt {d.attempt}")
    await st.want("ack", d.ack())
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/release")
async def release(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.release", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.enqueue(q, b"not now"))
    sub = await c.consumer.subscribe(q, prefetch=1)
    d = await nxt(sub)
    await st.want("release", d.release())
    d = await nxt(sub)
    st.check("redelivery", d.attempt == 1, f"attempt {d.attempt}")
    await st.want("ack", d.ack())
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/extend_lease")
async def extend_lease(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.extend", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.enqueue(q, b"long job"))
    sub = await c.consumer.subscribe(q, prefetch=1)
    d = await nxt(sub)
    await st.want("extend", d.extend_lease(120))
    await st.want("ack", d.ack())
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/idempotency")
async def idempotency(addr: str) -> None:
    c = await connect(addr)
    q, p, st = "hp.idempotency", c.producer, Steps()
    await st.want("create", c.admin.create_queue(q))
    rs = await st.want("send", p.send_batch([Message(q, b"charge", idempotency_key="order-17"),
                                            Message(q, b"charge again", idempotency_key="order-17")]))
    rs2 = await st.want("send later", p.send_batch([Message(q, b"charge later", idempotency_key="order-17")]))
    if rs is not None and rs2 is not None and len(rs) == 2 and len(rs2) == 1:
        st.check("duplicates", not rs[0].duplicate and rs[1].duplicate and rs2[0].duplicate
                 and rs[1].id == rs[0].id and rs2[0].id == rs[0].id, f"got {rs} {rs2}")
    await st.want("close", c.close())
    st.done()


@scenario("hotpath/delay")
async def delay(addr: str) -> None:
    c = await connect(addr)
    q, st = "hp.delay", Steps()
    await st.want("create", c.admin.create_queue(q))
    sub = await c.consumer.subscribe(q, prefetch=1)
    await st.want("send", c.producer.send(Message(q, b"later", delay=0.2)))
    d = await nxt(sub)
    await st.want("ack", d.ack())
    await st.want("close", c.close())
    st.done()


# ---- credit ----

@scenario("credit/exhaustion_replenish")
async def exhaustion_replenish(addr: str) -> None:
    c = await connect(addr)
    q, st = "cr.exhaustion", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.send_batch([Message(q, b"m1"), Message(q, b"m2"), Message(q, b"m3")]))
    sub = await c.consumer.subscribe(q, prefetch=2)
    ds = [await nxt(sub), await nxt(sub)]
    await st.want("ack m1", ds[0].ack())
    d = await nxt(sub)
    st.check("third", d.payload == b"m3", f"got {d.payload!r}")
    await st.want("ack m2", ds[1].ack())
    await st.want("ack m3", d.ack())
    await st.want("close", c.close())
    st.done()


@scenario("credit/two_subscriptions")
async def two_subscriptions(addr: str) -> None:
    c = await connect(addr)
    qa, qb, st = "cr.two.orders", "cr.two.billing", Steps()
    await st.want("create a", c.admin.create_queue(qa))
    await st.want("create b", c.admin.create_queue(qb))
    sa = await c.consumer.subscribe(qa, prefetch=1)
    sb = await c.consumer.subscribe(qb, prefetch=1)
    for rnd in range(2):
        await st.want("send", c.producer.send_batch([Message(qa, f"order {rnd}".encode()), Message(qb, f"invoice {rnd}".encode())]))
        da = await nxt(sa)
        db = await nxt(sb)
        await st.want("ack b", db.ack())
        await st.want("ack a", da.ack())
    await st.want("unsubscribe a", sa.close())
    await st.want("unsubscribe b", sb.close())
    await st.want("close", c.close())
    st.done()


@scenario("credit/unlimited")
async def unlimited(addr: str) -> None:
    c = await connect(addr)
    q, st = "cr.unlimited", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.send_batch([Message(q, b"u1"), Message(q, b"u2"), Message(q, b"u3")]))
    sub = await c.consumer.subscribe(q, prefetch=0)
    st.check("granted", sub.prefetch == 2, f"granted {sub.prefetch}; want the cap, 2")
    ds = [await nxt(sub), await nxt(sub)]
    await st.want("ack u1", ds[0].ack())
    d = await nxt(sub)
    st.check("third", d.payload == b"u3", f"got {d.payload!r}")
    await st.want("ack u2 and u3", c.consumer.ack_all([ds[1], d]))
    await st.want("close", c.close())
    st.done()


@scenario("credit/lease_expiry_returns_credit")
async def lease_expiry_returns_credit(addr: str) -> None:
    c = await connect(addr)
    q, st = "cr.lease-expiry", Steps()
    await st.want("create", c.admin.create_queue(q, backoff=(60, 60)))
    await st.want("send", c.producer.send_batch([Message(q, b"e1"), Message(q, b"e2"), Message(q, b"e3"), Message(q, b"e4")]))
    sub = await c.consumer.subscribe(q, prefetch=2)
    ds = [await nxt(sub) for _ in range(4)]
    st.check("after the expiry", ds[2].payload == b"e3" and ds[3].payload == b"e4", f"got {ds[2].payload!r} and {ds[3].payload!r}")
    await st.want("ack expired e1", ds[0].ack(), LeaseExpiredError)
    await st.want("ack e3", ds[2].ack())
    await st.want("ack e4", ds[3].ack())
    await st.want("close", c.close())
    st.done()


@scenario("credit/unsubscribe_then_ack")
async def unsubscribe_then_ack(addr: str) -> None:
    c = await connect(addr)
    q, st = "cr.unsub-ack", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.enqueue(q, b"keep"))
    sub = await c.consumer.subscribe(q, prefetch=1)
    d = await nxt(sub)
    await st.want("unsubscribe", sub.close())
    await st.want("ack", d.ack())
    await st.want("close", c.close())
    st.done()


# ---- leases ----

@scenario("lease/expiry_redelivery")
async def expiry_redelivery(addr: str) -> None:
    c = await connect(addr)
    q, st = "ls.expiry", Steps()
    await st.want("create", c.admin.create_queue(q))
    await st.want("send", c.producer.enqueue(q, b"slow"))
    sub = await c.consumer.subscribe(q, prefetch=2)
    d1 = await nxt(sub)
    d2 = await nxt(sub)
    st.check("redelivery", d2.id == d1.id and d2.attempt == 2, f"got {d2.uuid} attempt {d2.attempt}")
    await st.want("ack old lease", d1.ack(), LeaseExpiredError)
    await st.want("ack new lease", d2.ack())
    await st.want("close", c.close())
    st.done()


@scenario("lease/expiry_dead_letter")
async def expiry_dead_letter(addr: str) -> None:
    c = await connect(addr)
    q, st = "ls.dead-letter", Steps()
    await st.want("create", c.admin.create_queue(q, max_attempts=1))
    await st.want("send", c.producer.enqueue(q, b"doomed"))
    sub = await c.consumer.subscribe(q, prefetch=1)
    await nxt(sub)
    dlq = await c.consumer.subscribe(q + ".dlq", prefetch=1)
    d = await nxt(dlq)
    st.check("dead letter", d.headers.get("fila-attempts") == "1", f"headers {d.headers}")
    await st.want("ack", d.ack())
    await st.want("close", c.close())
    st.done()


# ---- written by hand: errors, clusters, a misbehaving broker ----

@scenario("errors/unavailable_goaway")
async def unavailable_goaway(addr: str) -> None:
    c = await connect(addr)
    st = Steps()
    await st.want("send", c.producer.enqueue("er.shutdown", b"x"), UnavailableError)
    await c.close()
    st.done()


@scenario("errors/internal")
async def internal(addr: str) -> None:
    await one_call(addr, InternalError, lambda c: c.admin.create_queue("er.internal"))


@scenario("errors/not_supported")
async def not_supported(addr: str) -> None:
    await one_call(addr, NotSupportedError, lambda c: c.admin.list_queues())


@scenario("errors/resource_exhausted")
async def resource_exhausted(addr: str) -> None:
    await one_call(addr, ResourceExhaustedError, lambda c: c.consumer.subscribe("er.busy", prefetch=1))


@scenario("errors/forbidden")
async def forbidden(addr: str) -> None:
    c = await connect(addr, api_key="fila_producer_orders")
    st = Steps()
    rs = await st.want("send", c.producer.send_batch([Message("er.billing", b"invoice")]))
    if rs is not None and len(rs) == 1:
        st.check("send result", isinstance(rs[0].error, ForbiddenError), f"got {rs[0].error!r}")
    await st.want("stats", c.admin.queue_stats("er.billing"), ForbiddenError)
    await st.want("close", c.close())
    st.done()


@scenario("cluster/move_queue")
async def cluster_move_queue(addr: str) -> None:
    c = await connect(addr)
    st = Steps()
    await st.want("move queue", c.admin.call(wire.MoveQueue(queue="cl.orders", replicas=[2, 3, 4])))
    cs = await st.want("cluster status", c.admin.cluster_status())
    if cs is not None:
        g = cs.groups
        moving = (len(g) == 2 and g[1].target == [2, 3, 4] and len(g[1].replicas) == 4
                  and g[1].replicas[3].learner and not g[1].replicas[0].learner)
        st.check("cluster status", moving and not g[0].target, f"got {cs}")
    await st.want("close", c.close())
    st.done()


@scenario("cluster/drain_node")
async def cluster_drain_node(addr: str) -> None:
    c = await connect(addr)
    st = Steps()
    r = await st.want("drain node", c.admin.call(wire.DrainNode(node_id=3)))
    st.check("drain node", r is None or getattr(r, "queues", None) == 2, f"got {r}; want 2 queues")
    cs = await st.want("cluster status", c.admin.cluster_status())
    if cs is not None:
        g = cs.groups
        moving = len(g) == 3 and not g[0].target and g[1].target == [1, 2, 4] and g[2].target == [1, 2, 4]
        states = [n.state for n in cs.nodes]
        st.check("cluster status", moving and states == ["active", "active", "draining", "active"], f"got {cs}")
    await st.want("undrain node", c.admin.call(wire.DrainNode(node_id=3, undo=True)))
    await st.want("close", c.close())
    st.done()


@scenario("cluster/membership")
async def cluster_membership(addr: str) -> None:
    c = await connect(addr)
    a, st = c.admin, Steps()
    await st.want("add node", a.call(wire.AddNode(node_id=4, peer_addr="10.0.0.4:5556")))
    plan = await st.want("rebalance dry run", a.call(wire.Rebalance(dry_run=True)))
    if isinstance(plan, wire.RebalanceResult):
        st.check("rebalance dry run", plan.moves == [wire.RebalanceMove(queue="orders", from_node_id=1, to_node_id=4)]
                 and plan.leads == [wire.RebalanceLead(queue="orders", node_id=4)], f"got {plan}")
    await st.want("rebalance", a.call(wire.Rebalance()))
    cs = await st.want("cluster status", a.cluster_status())
    if cs is not None:
        st.check("cluster status", cs.pending == [wire.RebalanceMove(queue="billing", from_node_id=2, to_node_id=4)]
                 and len(cs.groups) == 2 and cs.groups[1].preferred_leader == 4, f"got {cs}")
    await st.want("remove node", a.call(wire.RemoveNode(node_id=3)), InvalidArgumentError)
    await st.want("remove drained node", a.call(wire.RemoveNode(node_id=5)))
    await st.want("close", c.close())
    st.done()


@scenario("robustness/server_ping")
async def server_ping(addr: str) -> None:
    await one_call(addr, None, lambda c: c.ping())


@scenario("robustness/unknown_push")
async def unknown_push(addr: str) -> None:
    await one_call(addr, None, lambda c: c.ping())


async def _failed_ping(addr: str) -> None:
    c = await connect(addr)
    try:
        await c.ping()
    except CoreError:
        return
    finally:
        await c.close()
    raise ScenarioError("ping succeeded; want it to fail")


@scenario("robustness/truncated_server_frame")
async def truncated_server_frame(addr: str) -> None:
    await _failed_ping(addr)


@scenario("robustness/oversized_server_frame")
async def oversized_server_frame(addr: str) -> None:
    await _failed_ping(addr)


@scenario("robustness/delivery_beyond_credit")
async def delivery_beyond_credit(addr: str) -> None:
    c = await connect(addr)
    try:
        sub = await c.consumer.subscribe("rb.credit", prefetch=1)
        err = await sub.wait_ended(WAIT)
        if err is None:
            raise ScenarioError("the subscription ended without an error")
    finally:
        await c.close()


@scenario("robustness/server_version_mismatch")
async def server_version_mismatch(addr: str) -> None:
    try:
        c = await connect(addr)
    except CoreError:
        return
    await c.close()
    raise ScenarioError("connect succeeded with protocol version 9")


def run(name: str, addr: str) -> int:
    """Run scenario name against addr: 0 when it succeeded, 1 when a step
    failed, SKIP (77) for a scenario this client does not implement."""
    sc = SCENARIOS.get(name)
    if sc is None:
        print(f"fila.conformance: no scenario {name!r}", file=sys.stderr)
        return SKIP
    try:
        asyncio.run(asyncio.wait_for(sc(addr), 60))
    except (ScenarioError, FilaError, CoreError, OSError, asyncio.TimeoutError) as e:
        print(f"fila.conformance: {name}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0
