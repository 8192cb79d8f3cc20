/**
 * The I/O shell of the TypeScript client: a TCP (or TLS) socket from
 * Node's net/tls around the sans-io core (core.ts), and the handles an
 * application uses: Producer, Consumer (subscriptions are async
 * iterators of Delivery), Administrator, and the Message builder.
 *
 *     const c = await Client.connect({ addr: "127.0.0.1:5555" });
 *     await c.admin.createQueue({ name: "orders" });
 *     const id = await c.producer.send(new Message("orders", "hello").fairnessKey("acme"));
 *     const sub = await c.consumer.subscribe("orders", { prefetch: 16 });
 *     for await (const d of sub) { await d.ack(); break; }
 *     await c.close();
 *
 * One Client is one connection; it does not reconnect. Calls may be made
 * concurrently: concurrent sends are batched into one Enqueue.
 *
 * @module
 */

import * as net from "node:net";
import * as tls from "node:tls";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";

import { uuidString, parseUUID } from "./codec.js";
import { Conn } from "./core.js";
import type { ConnState, Ready } from "./core.js";
import { Code, FilaError, errorOf } from "./errors_gen.js";
import {
  Ack,
  AddNode,
  CreateApiKey,
  CreateQueue,
  DEFAULT_PORT,
  DeleteConfig,
  DeleteQueue,
  DrainNode,
  Enqueue,
  EnqueueMessage,
  Explain,
  ExtendLease,
  GetAcl,
  GetConfig,
  ListApiKeys,
  ListConfig,
  ListQueues,
  MessageHeader,
  MoveQueue,
  Nack,
  OPCODE_NAMES,
  Opcode,
  Ping,
  QueueStats,
  Rebalance,
  Redrive,
  Release,
  RemoveNode,
  RetryAfter,
  RevokeApiKey,
  SetAcl,
  SetConfig,
  Subscribe,
  Topology,
  ClusterStatus,
} from "./wire_gen.js";
import type {
  AckResult,
  AddNodeResult,
  ClusterStatusResult,
  CreateApiKeyResult,
  CreateQueueOk,
  DeleteConfigOk,
  DeliveredMessage,
  DrainNodeResult,
  EnqueueItemResult,
  EnqueueResult,
  ExplainResult,
  ExtendLeaseResult,
  Frame,
  GetAclResult,
  GetConfigResult,
  ItemResult,
  ListApiKeysResult,
  ListConfigResult,
  ListQueuesResult,
  MoveQueueResult,
  Permission,
  QueueStatsResult,
  RateLimit,
  RebalanceResult,
  RedriveResult,
  RemoveNodeResult,
  SubscribeOk,
  TopologyResult,
} from "./wire_gen.js";

/** The client's name in the broker's logs. */
export const CLIENT_NAME = "fila-ts/0.1.0";

/** Options of Client.connect. */
export interface ConnectOptions {
  /** host:port of the broker; the port defaults to 5555. */
  addr: string;
  /** The API key secret, when the broker has auth on. */
  apiKey?: string;
  /** TLS: true for the system's CAs, or Node's tls.ConnectionOptions (ca, cert, key, servername). */
  tls?: boolean | tls.ConnectionOptions;
  /** Identifies the client in the broker's logs; defaults to fila-ts/<version>. */
  clientName?: string;
  /** The largest frame body this client accepts, in bytes; 0 means 16 MiB. */
  maxFrameSize?: number;
  /** Silence before a keepalive Ping, in ms; 0 means 30 s, negative disables. */
  keepaliveMs?: number;
  /** How long the TCP (and TLS) connect may take, in ms; default 10 s. The handshake, like a keepalive Ping, may take 10 s more. */
  connectTimeoutMs?: number;
  /** How long close waits for requests in flight and the broker's goodbye, in ms; default 5 s. */
  drainTimeoutMs?: number;
  /** Called for a request the broker redirected (NOT_LEADER) with the leader's address. */
  onRedirect?: (leaderHint: string, op: string) => void;
}

/** The connection closed, by close() or because it failed (cause). */
export class ClosedError extends Error {
  /** Makes the error. */
  constructor(override readonly cause?: Error) {
    super(cause ? "fila: client closed: " + cause.message : "fila: client closed");
    this.name = "ClosedError";
  }
}

interface Waiter {
  resolve: (f: Frame) => void;
  reject: (e: Error) => void;
}

function splitAddr(addr: string): { host: string; port: number } {
  const i = addr.lastIndexOf(":");
  if (i < 0 || addr.endsWith("]")) return { host: addr.replace(/^\[|\]$/g, ""), port: DEFAULT_PORT };
  return { host: addr.slice(0, i).replace(/^\[|\]$/g, ""), port: Number(addr.slice(i + 1)) };
}

/**
 * A Client is one connection to a broker and its three handles. Make one
 * with Client.connect; close it with close.
 */
export class Client {
  /** Sends messages. */
  readonly producer: Producer;
  /** Opens subscriptions and settles deliveries. */
  readonly consumer: Consumer;
  /** Administers queues, keys, config and the cluster. */
  readonly admin: Administrator;

  private readonly core: Conn;
  private readonly sock: net.Socket;
  private readonly opts: ConnectOptions;
  private readonly waiters = new Map<number, Waiter>();
  /** @internal */
  readonly subs = new Map<number, Subscription>();
  private timer: NodeJS.Timeout | undefined;
  private timerAt = 0;
  private scheduled = false;
  private stateNow: ConnState;
  private err: Error | undefined;
  private closing = false;
  private readonly sockClosed: Promise<void>;
  private readonly handshake: Promise<void>;
  private handshakeDone!: (e?: Error) => void;
  private idleWaiters: (() => void)[] = [];

  private constructor(opts: ConnectOptions, sock: net.Socket) {
    this.opts = opts;
    this.sock = sock;
    this.core = new Conn({
      clientName: opts.clientName ?? CLIENT_NAME,
      apiKey: opts.apiKey ?? "",
      maxFrameSize: opts.maxFrameSize ?? 0,
      keepaliveIntervalMs: opts.keepaliveMs ?? 0,
    });
    this.stateNow = this.core.state();
    this.producer = new Producer(this);
    this.consumer = new Consumer(this);
    this.admin = new Administrator(this);
    this.handshake = new Promise((resolve, reject) => {
      this.handshakeDone = (e) => (e ? reject(e) : resolve());
    });
    this.handshake.catch(() => {});
    sock.setNoDelay(true);
    sock.on("data", (b: Buffer) => {
      this.core.tick(performance.now());
      this.core.receive(b);
      this.pump();
    });
    this.sockClosed = new Promise((resolve) => {
      sock.on("close", () => {
        this.core.connLost(this.closing ? new ClosedError() : new Error("EOF"));
        this.pump();
        resolve();
      });
    });
    sock.on("end", () => {
      // The broker closed its side: we have nothing more to say either.
      sock.end();
    });
    sock.on("error", (e) => {
      this.core.connLost(e);
      this.pump();
    });
    this.core.tick(performance.now());
    this.pump();
  }

  /**
   * Connects to the broker at opts.addr and completes the handshake.
   * Rejects with the broker's FilaError (UnauthorizedError for a wrong API
   * key, UnsupportedVersionError) or the connection's failure.
   */
  static async connect(opts: ConnectOptions): Promise<Client> {
    const { host, port } = splitAddr(opts.addr);
    const timeout = opts.connectTimeoutMs ?? 10_000;
    const sock = await new Promise<net.Socket>((resolve, reject) => {
      let s: net.Socket;
      const onErr = (e: Error) => reject(e);
      if (opts.tls) {
        const to: tls.ConnectionOptions = opts.tls === true ? {} : opts.tls;
        s = tls.connect({ host, port, servername: net.isIP(host) ? undefined : host, ...to }, () => resolve(s));
      } else {
        s = net.connect({ host, port }, () => resolve(s));
      }
      s.setTimeout(timeout, () => s.destroy(new Error(`fila: connect ${opts.addr}: timed out`)));
      s.once("error", onErr);
      s.once("connect", () => s.setTimeout(0));
      s.once("secureConnect", () => s.setTimeout(0));
    });
    const c = new Client(opts, sock);
    try {
      await c.handshake;
    } catch (e) {
      sock.destroy();
      throw e;
    }
    return c;
  }

  /** The broker's node ID. */
  get nodeId(): string {
    return this.stateNow.nodeId;
  }

  /** The broker's software and version. */
  get serverName(): string {
    return this.stateNow.serverName;
  }

  /** The connection's state as last reported by the core. */
  get state(): ConnState {
    return this.stateNow;
  }

  /**
   * Schedules a pump after this turn of the event loop, so that the calls
   * made in one turn share a write. @internal
   */
  schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  /** Runs the core's Readys: writes, completions, deliveries. */
  private pump(): void {
    while (this.core.hasReady()) {
      const rd = this.core.ready();
      if (rd.out.length > 0 && !this.sock.destroyed) this.sock.write(rd.out);
      this.handleReady(rd);
      this.core.advance(rd);
      this.arm(rd.deadline);
    }
    if (this.core.inFlight() === 0) {
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  private handleReady(rd: Ready): void {
    if (rd.state) {
      const was = this.stateNow;
      this.stateNow = rd.state;
      if (rd.state.handshaken && !was.handshaken) this.handshakeDone();
      if (rd.state.failed && !was.failed) {
        this.err = rd.state.err;
        const e = rd.state.err!;
        const cause = (e as { cause?: unknown }).cause;
        this.handshakeDone(e.name === "HandshakeError" && cause instanceof FilaError ? cause : e);
        this.sock.destroy();
      }
    }
    for (const cp of rd.completions) {
      const w = this.waiters.get(cp.requestId);
      if (!w) continue;
      this.waiters.delete(cp.requestId);
      if (cp.error) w.reject(cp.error);
      else w.resolve(cp.response!);
    }
    for (const d of rd.deliveries) {
      const s = this.subs.get(d.subscription);
      if (s) for (const m of d.messages) s.push(new Delivery(this, s, m));
    }
    for (const e of rd.ended) {
      const s = this.subs.get(e.subscription);
      if (s) {
        this.subs.delete(e.subscription);
        s.end(e.error);
      }
    }
    for (const r of rd.redirects) this.opts.onRedirect?.(r.leaderHint, OPCODE_NAMES[r.op] ?? "");
  }

  private arm(deadline: number): void {
    if (deadline === 0 || (this.timer && this.timerAt === deadline)) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = deadline;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.core.tick(performance.now());
        this.pump();
      },
      Math.max(0, deadline - performance.now()) + 1,
    );
    this.timer.unref();
  }

  private failure(): Error {
    if (this.err) return new ClosedError(this.err);
    return new ClosedError();
  }

  /**
   * Sends request f and resolves with its response frame; rejects with a
   * FilaError for the broker's Error, or a ConnectionLostError. @internal
   */
  call<R extends Frame>(f: Frame): Promise<R> {
    let id: number;
    try {
      id = this.core.send(f);
    } catch (e) {
      return Promise.reject(this.err ? this.failure() : e);
    }
    this.schedule();
    return new Promise<R>((resolve, reject) => {
      this.waiters.set(id, { resolve: resolve as (f: Frame) => void, reject });
    });
  }

  /** Sends f after settling leases of subscription sub, so their credit goes back first. @internal */
  settleAndCall<R extends Frame>(sub: number, leases: bigint[], f: Frame): Promise<R> {
    if (leases.length > 0) this.core.settle(sub, leases);
    return this.call<R>(f);
  }

  /** Settles leases of subscription sub without a request. @internal */
  settleLeases(sub: number, leases: bigint[]): void {
    this.core.settle(sub, leases);
  }

  /** Opens a subscription in the core. @internal */
  openSubscription(s: Subscription, f: Subscribe): Promise<SubscribeOk> {
    let id: number;
    try {
      id = this.core.subscribeFrame(f);
    } catch (e) {
      return Promise.reject(this.err ? this.failure() : e);
    }
    s.id = id;
    this.subs.set(id, s);
    this.schedule();
    return new Promise<SubscribeOk>((resolve, reject) => {
      this.waiters.set(id, {
        resolve: resolve as (f: Frame) => void,
        reject: (e) => {
          this.subs.delete(id);
          reject(e);
        },
      });
    });
  }

  /** Unsubscribes in the core. @internal */
  closeSubscription(id: number): Promise<Frame> {
    let rid: number;
    try {
      rid = this.core.unsubscribe(id);
    } catch (e) {
      return Promise.reject(e);
    }
    this.schedule();
    return new Promise<Frame>((resolve, reject) => this.waiters.set(rid, { resolve, reject }));
  }

  /** The most items the broker takes in one batch request. @internal */
  maxBatch(): number {
    return this.stateNow.maxBatchSize;
  }

  /** Pings the broker and resolves with the round trip in ms. */
  async ping(): Promise<number> {
    const t0 = performance.now();
    await this.call(Ping.make({ nonce: 1n }));
    return performance.now() - t0;
  }

  /**
   * Leaves gracefully: sends GoAway, waits (up to drainTimeoutMs) for the
   * requests in flight and for the broker to close, then closes the
   * socket. Resolves once it is closed.
   */
  async close(): Promise<void> {
    if (this.closing) return this.sockClosed;
    this.closing = true;
    await this.producer.flushed();
    if (!this.stateNow.failed) {
      this.core.close();
      this.pump();
    }
    const limit = this.opts.drainTimeoutMs ?? 5000;
    let t: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      t = setTimeout(resolve, limit);
    });
    const idle = new Promise<void>((resolve) => {
      if (this.core.inFlight() === 0) resolve();
      else this.idleWaiters.push(resolve);
    });
    await Promise.race([idle.then(() => this.sockClosed), timeout]);
    clearTimeout(t);
    if (this.timer) clearTimeout(this.timer);
    this.sock.end();
    if (!this.sock.destroyed) {
      const t2 = setTimeout(() => this.sock.destroy(), 1000);
      await this.sockClosed;
      clearTimeout(t2);
    }
  }
}

/** Makes an item error: the FilaError of a per-item result's code. */
function itemError(op: string, code: Code, message: string): FilaError {
  return errorOf(code, message, "", op);
}

// ---------------------------------------------------------------------------
// Producer

/**
 * A Message is one message to send, built with chained setters:
 * `new Message("orders", payload).header("tenant", "acme").fairnessKey("acme").weight(3)`.
 */
export class Message {
  /** The wire form. @internal */
  readonly m: EnqueueMessage;

  /** A message of payload (bytes, or a string sent as UTF-8) to queue. */
  constructor(queue: string, payload: Uint8Array | string) {
    this.m = EnqueueMessage.make({
      queue,
      payload: typeof payload === "string" ? new TextEncoder().encode(payload) : payload,
    });
  }
  /** Adds an application header, delivered unchanged; keys starting with fila- are reserved. */
  header(key: string, value: string): this {
    this.m.headers.push(MessageHeader.make({ key, value }));
    return this;
  }
  /** Sets the fairness key; empty means "default" unless the queue's hook sets one. */
  fairnessKey(key: string): this {
    this.m.fairnessKey = key;
    return this;
  }
  /** Sets the fairness key's weight; 0 means 1. */
  weight(w: number): this {
    this.m.weight = w;
    return this;
  }
  /** Adds a throttle key: a token bucket the message takes a token from before delivery. */
  throttleKey(key: string): this {
    this.m.throttleKeys.push(key);
    return this;
  }
  /** Delays delivery by ms milliseconds after enqueue. */
  delay(ms: number): this {
    this.m.delayMs = BigInt(Math.max(0, Math.round(ms)));
    return this;
  }
  /**
   * Sets the time to live, in ms from enqueue: a message not delivered
   * within it expires (dead-lettered with fila-error "expired", or
   * dropped, as its queue says). 0: the queue's TTL. At most 30 days.
   */
  ttl(ms: number): this {
    this.m.ttlMs = BigInt(Math.max(0, Math.ceil(ms)));
    return this;
  }
  /**
   * Sets the priority within the fairness key, 0 (lowest) to 9 (highest);
   * the default is 4. Outside 0 to 9 the broker refuses the message with
   * InvalidArgumentError.
   */
  priority(p: number): this {
    this.m.priority = Number.isInteger(p) && p >= 0 && p <= 9 ? p + 1 : 255;
    return this;
  }
  /** Sets the idempotency key: a second message with it within the dedup window is not enqueued. */
  idempotencyKey(key: string): this {
    this.m.idempotencyKey = key;
    return this;
  }
  /** Sets the ordering key: messages sharing it are delivered one at a time, in order. */
  orderingKey(key: string): this {
    this.m.orderingKey = key;
    return this;
  }
  /** The target queue. */
  get queue(): string {
    return this.m.queue;
  }
}

/** The outcome of one message of sendBatch. */
export interface SendResult {
  /** The message ID (UUIDv7, canonical form) when error is unset. */
  id: string;
  /** True if the message was not enqueued because the queue already held its idempotency key; id is the first message's. */
  duplicate: boolean;
  /** The message's failure: QueueNotFoundError, MessageTooLargeError, ... */
  error?: FilaError;
}

interface Queued {
  m: EnqueueMessage;
  resolve: (r: EnqueueItemResult) => void;
  reject: (e: Error) => void;
}

/**
 * The Producer sends messages. Every Enqueue carries the producer's
 * random ID and the sequence of its first message, so a resent frame is
 * not enqueued twice. Concurrent sends are batched: those made in one turn
 * of the event loop share an Enqueue.
 */
export class Producer {
  private readonly id = parseUUID(randomUUID());
  private seq = 1n;
  private queue: Queued[] = [];
  private flushing = false;
  private inflight = 0;
  private drained: (() => void)[] = [];

  /** @internal */
  constructor(private readonly c: Client) {}

  /** Sends payload to queue; resolves with the message ID. */
  enqueue(queue: string, payload: Uint8Array | string): Promise<string> {
    return this.send(new Message(queue, payload));
  }

  /**
   * Sends m; resolves with its ID once it is durable. Rejects with its
   * FilaError (QueueNotFoundError, MessageTooLargeError, ...).
   */
  async send(m: Message): Promise<string> {
    const r = await new Promise<EnqueueItemResult>((resolve, reject) => {
      this.queue.push({ m: m.m, resolve, reject });
      if (!this.flushing) {
        this.flushing = true;
        setImmediate(() => this.flush());
      }
    });
    if (r.code !== Code.Ok) throw itemError("Enqueue", r.code, r.message);
    return uuidString(r.id);
  }

  /**
   * Sends msgs in one Enqueue and resolves with one result per message, in
   * order: a message that failed alone has its error in its result. Rejects
   * only if the whole request failed.
   */
  async sendBatch(msgs: Message[]): Promise<SendResult[]> {
    this.flush();
    const rs = await this.enqueueFrame(msgs.map((m) => m.m));
    return rs.map((r) =>
      r.code === Code.Ok
        ? { id: uuidString(r.id), duplicate: r.duplicate }
        : { id: "", duplicate: false, error: itemError("Enqueue", r.code, r.message) },
    );
  }

  private enqueueFrame(msgs: EnqueueMessage[]): Promise<EnqueueItemResult[]> {
    const f = Enqueue.make({ messages: msgs, producerId: this.id, sequence: this.seq });
    this.seq += BigInt(msgs.length);
    this.inflight++;
    return this.c.call<EnqueueResult>(f).then(
      (r) => {
        this.done();
        return r.results;
      },
      (e) => {
        this.done();
        throw e;
      },
    );
  }

  private done(): void {
    if (--this.inflight === 0 && this.queue.length === 0) {
      const d = this.drained;
      this.drained = [];
      for (const f of d) f();
    }
  }

  /** Resolves once every send made so far is answered. @internal */
  flushed(): Promise<void> {
    this.flush();
    if (this.inflight === 0) return Promise.resolve();
    return new Promise((resolve) => this.drained.push(resolve));
  }

  private flush(): void {
    this.flushing = false;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.c.maxBatch());
      this.enqueueFrame(batch.map((q) => q.m)).then(
        (rs) => batch.forEach((q, i) => q.resolve(rs[i]!)),
        (e: Error) => batch.forEach((q) => q.reject(e)),
      );
    }
  }
}

// ---------------------------------------------------------------------------
// Consumer

/** Options of subscribe. */
export interface SubscribeOptions {
  /** The most deliveries held unsettled (the credit granted); 0 asks for the broker's cap. Default 0. */
  prefetch?: number;
  /** Consumer-declared rate limits, each { name, limit, periodMs, burst }. */
  rateLimits?: Partial<RateLimit>[];
  /** Any other field of the Subscribe frame, by its camelCase name. */
  more?: Partial<Omit<Subscribe, "op" | "queue" | "prefetch" | "rateLimits">>;
}

/**
 * The Consumer opens subscriptions and settles deliveries in batches.
 */
export class Consumer {
  /** @internal */
  constructor(private readonly c: Client) {}

  /**
   * Opens a subscription to queue; resolves once the broker accepted it.
   * Rejects with QueueNotFoundError, ForbiddenError, ...
   */
  async subscribe(queue: string, opts: SubscribeOptions = {}): Promise<Subscription> {
    const s = new Subscription(this.c, queue);
    const f = Subscribe.make({
      ...opts.more,
      queue,
      prefetch: opts.prefetch ?? 0,
      rateLimits: (opts.rateLimits ?? []).map((r) => RateLimitOf(r)),
    });
    const ok = await this.c.openSubscription(s, f);
    s.prefetch = ok.prefetch;
    return s;
  }

  /**
   * Acks several deliveries in one request (several past the broker's
   * batch cap). Rejects with the first item's error if any failed (all
   * items are still processed).
   */
  async ackAll(ds: Delivery[]): Promise<void> {
    let first: Error | undefined;
    for (let i = 0; i < ds.length; i += this.c.maxBatch()) {
      const part = ds.slice(i, i + this.c.maxBatch());
      try {
        await this.ackPart(part);
      } catch (e) {
        first ??= e as Error;
      }
    }
    if (first) throw first;
  }

  private async ackPart(ds: Delivery[]): Promise<void> {
    const bySub = new Map<number, bigint[]>();
    for (const d of ds) {
      const l = d.settle();
      if (l !== undefined) bySub.set(d.sub.id, [...(bySub.get(d.sub.id) ?? []), l]);
    }
    // Each subscription's Credit goes out before the Ack, which is sent once.
    const subs = [...bySub.entries()];
    const last = subs.pop();
    for (const [sub, leases] of subs) this.c.settleLeases(sub, leases);
    const f = Ack.make({ items: ds.map((d) => d.ref()) });
    const r = await this.c.settleAndCall<AckResult>(last?.[0] ?? 0, last?.[1] ?? [], f);
    checkItems("Ack", r.results);
  }
}

function RateLimitOf(r: Partial<RateLimit>): RateLimit {
  return { name: r.name ?? "", limit: r.limit ?? 0, periodMs: r.periodMs ?? 0n, burst: r.burst ?? 0 };
}

function checkItems(op: string, rs: { code: Code; message: string }[]): void {
  for (const r of rs) if (r.code !== Code.Ok) throw itemError(op, r.code, r.message);
}

/**
 * A Subscription is an async iterator of deliveries:
 * `for await (const d of sub) { ...; await d.ack(); }`. The loop ends when
 * the subscription is closed, and throws the error that ended it (such as
 * QueueNotFoundError when its queue was deleted, or a ConnectionLostError).
 */
export class Subscription implements AsyncIterable<Delivery> {
  /** The subscription's ID on the connection. */
  id = 0;
  /** The credit the broker granted: the most deliveries held unsettled. */
  prefetch = 0;
  /** Why the subscription ended; undefined while open or after close. */
  error: Error | undefined;
  /** Resolves once the subscription has ended, with why (undefined after close). */
  readonly ended: Promise<Error | undefined>;

  private buf: Delivery[] = [];
  private head = 0;
  private waiting: { resolve: (r: IteratorResult<Delivery>) => void; reject: (e: Error) => void } | undefined;
  private done = false;
  private endedResolve!: (e: Error | undefined) => void;

  /** @internal */
  constructor(
    private readonly c: Client,
    /** The queue consumed. */
    readonly queue: string,
  ) {
    this.ended = new Promise((resolve) => (this.endedResolve = resolve));
  }

  /** @internal */
  push(d: Delivery): void {
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w.resolve({ value: d, done: false });
      return;
    }
    this.buf.push(d);
  }

  /** @internal */
  end(err?: Error): void {
    this.done = true;
    this.error = err;
    this.endedResolve(err);
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      if (err) w.reject(err);
      else w.resolve({ value: undefined, done: true });
    }
  }

  /**
   * Resolves with the next delivery, or undefined once the subscription
   * has ended normally; rejects with the error that ended it.
   */
  async next(): Promise<Delivery | undefined> {
    const r = await this.nextResult();
    return r.done ? undefined : r.value;
  }

  private nextResult(): Promise<IteratorResult<Delivery>> {
    if (this.head < this.buf.length) {
      const d = this.buf[this.head++]!;
      if (this.head > 1024 && this.head * 2 > this.buf.length) {
        this.buf = this.buf.slice(this.head);
        this.head = 0;
      }
      return Promise.resolve({ value: d, done: false });
    }
    if (this.done) {
      return this.error ? Promise.reject(this.error) : Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => (this.waiting = { resolve, reject }));
  }

  /** Iterates the deliveries. */
  [Symbol.asyncIterator](): AsyncIterator<Delivery> {
    return { next: () => this.nextResult() };
  }

  /**
   * Closes the subscription (Unsubscribe). Deliveries already read can
   * still be settled; those received and not yet read are released.
   */
  async close(): Promise<void> {
    if (this.done) return;
    await this.c.closeSubscription(this.id);
    // Deliveries that arrived but were never read go back to the queue
    // at once, their attempt not counted, rather than waiting out their
    // leases.
    const unread = this.buf.slice(this.head);
    this.buf = [];
    this.head = 0;
    if (unread.length > 0) {
      for (const d of unread) d.settle();
      await this.c.call(Release.make({ items: unread.map((d) => d.ref()) })).catch(() => {});
    }
  }
}

/**
 * A Delivery is one message pushed to a subscription, leased to it until
 * leaseDeadline. Settle it with exactly one of ack, nack, retryAfter or
 * release; extendLease keeps it longer.
 */
export class Delivery {
  private settled = false;
  private deadlineMs: bigint;

  /** @internal */
  constructor(
    private readonly c: Client,
    /** @internal */
    readonly sub: Subscription,
    /** The wire form of the message. */
    readonly message: DeliveredMessage,
  ) {
    this.deadlineMs = message.leaseDeadlineAtMs;
  }

  /** The message ID, canonical UUID form. */
  get id(): string {
    return uuidString(this.message.id);
  }
  /** The queue it was delivered from. */
  get queue(): string {
    return this.message.queue;
  }
  /** The payload. */
  get payload(): Uint8Array {
    return this.message.payload;
  }
  /** The payload decoded as UTF-8. */
  text(): string {
    return new TextDecoder().decode(this.message.payload);
  }
  /** The headers, in the order the producer gave. */
  get headers(): [string, string][] {
    return this.message.headers.map((h) => [h.key, h.value]);
  }
  /** The last value of header key, or "". */
  header(key: string): string {
    let v = "";
    for (const h of this.message.headers) if (h.key === key) v = h.value;
    return v;
  }
  /** The resolved fairness key. */
  get fairnessKey(): string {
    return this.message.fairnessKey;
  }
  /** The resolved weight. */
  get weight(): number {
    return this.message.weight;
  }
  /** The resolved throttle keys. */
  get throttleKeys(): string[] {
    return this.message.throttleKeys;
  }
  /** The ordering key, or "". */
  get orderingKey(): string {
    return this.message.orderingKey;
  }
  /** Which delivery attempt this is, from 1. */
  get attempt(): number {
    return this.message.attempt;
  }
  /** When the broker accepted the message. */
  get enqueuedAt(): Date {
    return new Date(Number(this.message.enqueuedAtMs));
  }
  /** When the lease expires unless extended; moves with extendLease. */
  get leaseDeadline(): Date {
    return new Date(Number(this.deadlineMs));
  }
  /** The lease number. */
  get lease(): bigint {
    return this.message.lease;
  }

  /** @internal */
  ref(): { queue: string; id: Uint8Array; lease: bigint } {
    return { queue: this.message.queue, id: this.message.id, lease: this.message.lease };
  }

  /** The lease to settle, the first time only. @internal */
  settle(): bigint | undefined {
    if (this.settled) return undefined;
    this.settled = true;
    return this.message.lease;
  }

  private settling<R extends Frame>(f: Frame): Promise<R> {
    const l = this.settle();
    return this.c.settleAndCall<R>(this.sub.id, l === undefined ? [] : [l], f);
  }

  /**
   * Acknowledges the delivery: the message is deleted. Rejects with
   * LeaseExpiredError (the lease ended; the message may come again),
   * MessageNotFoundError or QueueNotFoundError.
   */
  async ack(): Promise<void> {
    const r = await this.settling<{ op: Opcode; results: ItemResult[] } & Frame>(Ack.make({ items: [this.ref()] }));
    checkItems("Ack", r.results);
  }

  /** Fails the delivery: it is retried under the queue's policy, or dead-lettered. */
  async nack(reason: string): Promise<void> {
    const r = await this.settling<{ op: Opcode; results: ItemResult[] } & Frame>(
      Nack.make({ items: [{ ...this.ref(), reason }] }),
    );
    checkItems("Nack", r.results);
  }

  /** Fails the delivery, to be delivered again no sooner than delayMs from now. */
  async retryAfter(delayMs: number): Promise<void> {
    const r = await this.settling<{ op: Opcode; results: ItemResult[] } & Frame>(
      RetryAfter.make({ items: [{ ...this.ref(), delayMs: BigInt(Math.round(delayMs)) }] }),
    );
    checkItems("RetryAfter", r.results);
  }

  /** Gives the delivery back without counting an attempt. */
  async release(): Promise<void> {
    const r = await this.settling<{ op: Opcode; results: ItemResult[] } & Frame>(
      Release.make({ items: [this.ref()] }),
    );
    checkItems("Release", r.results);
  }

  /** Extends the lease to now plus durationMs; resolves with the new deadline. */
  async extendLease(durationMs: number): Promise<Date> {
    const r = await this.c.call<ExtendLeaseResult>(
      ExtendLease.make({ items: [{ ...this.ref(), durationMs: BigInt(Math.round(durationMs)) }] }),
    );
    const it = r.results[0]!;
    if (it.code !== Code.Ok) throw itemError("ExtendLease", it.code, it.message);
    this.deadlineMs = it.leaseDeadlineAtMs;
    return this.leaseDeadline;
  }
}

// ---------------------------------------------------------------------------
// Administrator

/** The fields of CreateQueue: name, and any settings (zero takes the broker's default). */
export type QueueSpec = Partial<Omit<CreateQueue, "op">> & { name: string };

/**
 * The Administrator manages queues, runtime config, API keys and ACLs, and
 * the cluster. Each call resolves with the broker's response frame (see
 * wire_gen.ts for its fields) and rejects with a FilaError.
 */
export class Administrator {
  /** @internal */
  constructor(private readonly c: Client) {}

  /** Sends any request frame and resolves with its response. */
  request<R extends Frame>(f: Frame): Promise<R> {
    return this.c.call<R>(f);
  }

  /** Creates a queue and its DLQ. Rejects with QueueExistsError, InvalidArgumentError, ScriptError. */
  createQueue(spec: QueueSpec): Promise<CreateQueueOk> {
    return this.request(CreateQueue.make(spec));
  }
  /** Deletes a queue, its messages and its DLQ. Rejects with QueueNotFoundError. */
  async deleteQueue(name: string): Promise<void> {
    await this.request(DeleteQueue.make({ name }));
  }
  /** Lists the queues, sorted by name. */
  async listQueues(): Promise<ListQueuesResult["queues"]> {
    return (await this.request<ListQueuesResult>(ListQueues.make())).queues;
  }
  /** Inspects a queue; topKeys bounds the fairness keys reported (0: 1000). */
  queueStats(name: string, topKeys = 0): Promise<QueueStatsResult> {
    return this.request(QueueStats.make({ name, topKeys }));
  }
  /** Says why a message waits. */
  explain(queue: string, id: string): Promise<ExplainResult> {
    return this.request(Explain.make({ queue, id: parseUUID(id) }));
  }
  /** Sets a runtime-config key. */
  async setConfig(key: string, value: string): Promise<void> {
    await this.request(SetConfig.make({ key, value }));
  }
  /** Reads a runtime-config key. */
  getConfig(key: string): Promise<GetConfigResult> {
    return this.request(GetConfig.make({ key }));
  }
  /** Lists runtime-config entries under prefix. */
  async listConfig(prefix: string): Promise<ListConfigResult["entries"]> {
    return (await this.request<ListConfigResult>(ListConfig.make({ prefix }))).entries;
  }
  /** Deletes a runtime-config key; resolves with whether it existed. */
  async deleteConfig(key: string): Promise<boolean> {
    return (await this.request<DeleteConfigOk>(DeleteConfig.make({ key }))).existed;
  }
  /** Moves up to count messages (0: all) of a DLQ back to its queue; resolves with how many. */
  async redrive(deadLetterQueue: string, count = 0n, more: Partial<Omit<Redrive, "op">> = {}): Promise<bigint> {
    return (await this.request<RedriveResult>(Redrive.make({ ...more, deadLetterQueue, count }))).moved;
  }
  /** Mints an API key; its secret is in the result, shown once. */
  createApiKey(name: string, permissions: Permission[] = []): Promise<CreateApiKeyResult> {
    return this.request(CreateApiKey.make({ name, permissions }));
  }
  /** Revokes an API key. Rejects with ApiKeyNotFoundError. */
  async revokeApiKey(keyId: string): Promise<void> {
    await this.request(RevokeApiKey.make({ keyId }));
  }
  /** Lists the API keys (never their secrets). */
  async listApiKeys(): Promise<ListApiKeysResult["keys"]> {
    return (await this.request<ListApiKeysResult>(ListApiKeys.make())).keys;
  }
  /** Replaces a key's ACL. */
  async setAcl(keyId: string, permissions: Permission[]): Promise<void> {
    await this.request(SetAcl.make({ keyId, permissions }));
  }
  /** Reads a key's ACL. */
  async getAcl(keyId: string): Promise<Permission[]> {
    return (await this.request<GetAclResult>(GetAcl.make({ keyId }))).permissions;
  }
  /** The shards of a queue and their leaders. */
  topology(queue: string): Promise<TopologyResult> {
    return this.request(Topology.make({ queue }));
  }
  /** The answering node's view of the cluster. */
  clusterStatus(): Promise<ClusterStatusResult> {
    return this.request(ClusterStatus.make());
  }
  /** Moves a queue's replicas to the given nodes. */
  async moveQueue(queue: string, replicas: bigint[]): Promise<MoveQueueResult> {
    return this.request(MoveQueue.make({ queue, replicas }));
  }
  /** Drains a node; resolves with the result (queues planned to move). */
  drainNode(nodeId: bigint): Promise<DrainNodeResult> {
    return this.request(DrainNode.make({ nodeId }));
  }
  /** Undoes a drain. */
  async undrainNode(nodeId: bigint): Promise<void> {
    await this.request(DrainNode.make({ nodeId, undo: true }));
  }
  /** Plans (dryRun) or starts a rebalance. */
  rebalance(dryRun: boolean): Promise<RebalanceResult> {
    return this.request(Rebalance.make({ dryRun }));
  }
  /** Adds a node to the cluster. */
  addNode(nodeId: bigint, peerAddr: string): Promise<AddNodeResult> {
    return this.request(AddNode.make({ nodeId, peerAddr }));
  }
  /** Removes a node from the cluster. */
  removeNode(nodeId: bigint): Promise<RemoveNodeResult> {
    return this.request(RemoveNode.make({ nodeId }));
  }
}
