/**
 * The sans-io client core of the Fila protocol: a deterministic state
 * machine over bytes and time, with no sockets, timers or clock of its
 * own. It owns what a client must get exactly right: the handshake and
 * version check, request-ID allocation and correlation, typed errors,
 * delivery routing and credit accounting, keepalive, continuation
 * reassembly and size limits, GoAway and leader redirects. The I/O shell
 * (client.ts) drives it; the conformance driver replays transcripts
 * through it.
 *
 * Usage, the shell's loop:
 *
 *     const c = new Conn({ clientName: "app/1.0" });
 *     c.tick(now);                        // the shell's monotonic clock, ms
 *     const id = c.send(Enqueue.make({ messages }));
 *     while (c.hasReady()) {
 *       const rd = c.ready();
 *       socket.write(rd.out);             // 1. write all of out, in order
 *       ...rd.completions, rd.deliveries, rd.expired, rd.ended, rd.redirects
 *       c.advance(rd);                    // 2. then advance
 *     }
 *     c.receive(bytes);                   // bytes read, in any split
 *
 * The caller's obligations, as in the Go core (sdk/core):
 *
 *  1. Call tick with the current monotonic time (ms) before receive and at
 *     or after every Ready's deadline.
 *  2. Write a Ready's out completely, in order, before advance (or queue it
 *     for a writer that drains in order).
 *  3. A Ready is read-only until advance.
 *  4. A Ready whose state has failed set is connection-scoped: close the
 *     connection. Every request in flight completes with a
 *     ConnectionLostError in that Ready.
 *  5. Report each delivery the application has finished with (acked,
 *     nacked, retried, released) with settle before sending the request
 *     that settles it, so its credit returns first. Settling a delivery
 *     whose lease expired returns nothing: the broker gave its credit back.
 *
 * The same calls with the same arguments produce the same Readys, byte for
 * byte.
 *
 * Unlike the Go core, this one neither splits a batch request with more
 * items than the broker's max_batch_size (ConnState.maxBatchSize) nor
 * routes across a cluster's nodes: the shell sends at most that many items
 * per request, and a NOT_LEADER is reported as a Redirect.
 *
 * @module
 */

import { Writer } from "./codec.js";
import { Code, FilaError, codeName, errorOf } from "./errors_gen.js";
import { ConnError, FrameReader, writeFrame } from "./frames.js";
import {
  CODECS,
  Credit,
  DEFAULT_MAX_FRAME_SIZE,
  GoAway,
  Handshake,
  MIN_MAX_FRAME_SIZE,
  MIN_PROTOCOL_VERSION,
  MAX_BATCH_SIZE,
  OPCODE_KINDS,
  OPCODE_NAMES,
  Opcode,
  PROTOCOL_VERSION,
  Ping,
  Pong,
  RESPONSE_OF,
  Subscribe,
  Unsubscribe,
  opcodeName,
} from "./wire_gen.js";
import type { DeliveredMessage, ExpiredLease, Frame, RateLimit } from "./wire_gen.js";
import { Reader } from "./codec.js";

/** Configures a connection. Every field is optional. */
export interface CoreConfig {
  /** Identifies the client in the broker's logs, such as "fila-ts/0.1.0". */
  clientName?: string;
  /** The API key secret presented at handshake; empty when auth is off. */
  apiKey?: string;
  /** Optional features to ask for. */
  capabilities?: string[];
  /** The largest frame body this side accepts, in bytes; 0 means 16 MiB. */
  maxFrameSize?: number;
  /** Silence before the core pings, in ms; 0 means 30 s, negative disables keepalive. */
  keepaliveIntervalMs?: number;
  /** How long a Ping or the handshake may go unanswered before the connection fails, in ms; 0 means 10 s. */
  keepaliveTimeoutMs?: number;
}

/** The connection's state; a Ready carries it when it changed. */
export interface ConnState {
  /** True once HandshakeOk arrived. */
  handshaken: boolean;
  /** The negotiated protocol version. */
  version: number;
  /** The broker's node ID. */
  nodeId: string;
  /** The broker's software and version. */
  serverName: string;
  /** Capabilities granted. */
  capabilities: string[];
  /** The largest frame body the broker accepts, in bytes. */
  serverMaxFrame: number;
  /** The most items the broker accepts in one batch request. */
  maxBatchSize: number;
  /** True once either side sent GoAway: no new requests. */
  goingAway: boolean;
  /** The code of the broker's GoAway. */
  goAwayCode: Code;
  /** The message of the broker's GoAway. */
  goAwayMessage: string;
  /** Where the broker's GoAway says to reconnect. */
  leaderHint: string;
  /** True once the connection is unusable; err says why. */
  failed: boolean;
  /** Why the connection failed. */
  err?: Error;
}

/** The end of a request: its response, or an error. */
export interface Completion {
  /** The request's ID. */
  requestId: number;
  /** The request's opcode. */
  op: Opcode;
  /** The request as sent. */
  request: Frame;
  /** The response, when error is unset. */
  response?: Frame;
  /** A FilaError (the broker's Error frame) or a ConnectionLostError. */
  error?: Error;
}

/** Messages pushed to one subscription. */
export interface DeliveryBatch {
  /** The subscription's ID (its Subscribe's request ID). */
  subscription: number;
  /** The messages, in order. */
  messages: DeliveredMessage[];
  /** Messages of the queue ready once these were delivered; 0 from an older broker. */
  backlog: bigint;
}

/**
 * Deliveries whose leases ended without a settle (the broker's
 * LeaseExpired). The core counts each as settled: the broker gave its
 * credit back.
 */
export interface Expiry {
  /** The subscription. */
  subscription: number;
  /** The expired leases. */
  leases: ExpiredLease[];
}

/** A subscription that will receive nothing more. */
export interface SubscriptionEnd {
  /** The subscription. */
  subscription: number;
  /** Unset after Unsubscribe; else why the broker ended it, or ConnectionLostError. */
  error?: Error;
}

/** A request the broker answered NOT_LEADER: send it again to leaderHint. */
export interface Redirect {
  /** The request's ID. */
  requestId: number;
  /** Its opcode. */
  op: Opcode;
  /** The request. */
  request: Frame;
  /** host:port of the leader; empty when unknown. */
  leaderHint: string;
}

/** What the core has for the shell; see the module's obligations. */
export interface Ready {
  /** Bytes to write, in order. */
  out: Uint8Array;
  /** Finished requests. */
  completions: Completion[];
  /** Deliveries, in arrival order. */
  deliveries: DeliveryBatch[];
  /** Leases that ended unsettled, in arrival order. */
  expired: Expiry[];
  /** Subscriptions that ended. */
  ended: SubscriptionEnd[];
  /** Requests redirected to the leader; each also has a Completion with a NotLeaderError. */
  redirects: Redirect[];
  /** The state when it changed since the last Ready. */
  state?: ConnState;
  /** When the shell must call tick next, in ms; 0 means none. */
  deadline: number;
}

/** Completes requests and ends subscriptions in flight when the connection failed. */
export class ConnectionLostError extends Error {
  /** Makes the error; cause is why the connection failed. */
  constructor(override readonly cause: Error) {
    super("fila: connection lost: " + cause.message);
    this.name = "ConnectionLostError";
  }
}

/** A request made after GoAway, or after the connection failed. */
export class GoingAwayError extends Error {
  /** Makes the error. */
  constructor() {
    super("fila: connection is going away");
    this.name = "GoingAwayError";
  }
}

/** Fails a connection whose Ping or handshake went unanswered. */
export class KeepaliveTimeoutError extends Error {
  /** Makes the error; detail says which wait ran out. */
  constructor(detail: string) {
    super("fila: keepalive timeout: " + detail);
    this.name = "KeepaliveTimeoutError";
  }
}

/** A broker that chose a protocol version outside this client's range. */
export class VersionError extends Error {
  /** Makes the error. */
  constructor(
    readonly server: number,
    readonly min: number,
    readonly max: number,
  ) {
    super(`fila: broker chose protocol version ${server}; this client speaks ${min} to ${max}`);
    this.name = "VersionError";
  }
}

/** The broker speaks TLS on this port and the client connected without it. */
export class TLSRequiredError extends Error {
  /** Makes the error. */
  constructor() {
    super("fila: the broker requires TLS on this port");
    this.name = "TLSRequiredError";
  }
}

/** Formats ms as a Go duration ("10s", "1.5s", "250ms"), for error texts. */
export function formatMs(ms: number): string {
  if (ms >= 1000) return `${ms / 1000}s`;
  return `${ms}ms`;
}

interface Pending {
  op: Opcode;
  req: Frame;
  /** Handshake and keepalive pings are not surfaced. */
  internal: boolean;
}

interface Subscription {
  /** The credit the application may hold; 0 for no limit. */
  prefetch: number;
  /** The prefetch asked for in Subscribe. */
  asked: number;
  /** True once SubscribeOk arrived. */
  active: boolean;
  /** Credit the broker may still spend. */
  outstanding: number;
  /** Leases delivered and not settled or expired. */
  held: Set<bigint>;
  /** Settled credit not yet returned. */
  unreturned: number;
  /** Credit to withhold (returned twice: by an expiry and a settle). */
  debt: number;
  /** The Unsubscribe in flight, 0 if none. */
  unsubReq: number;
}

/**
 * Conn is the state machine of one client connection. Its first Ready
 * holds the Handshake.
 */
export class Conn {
  private readonly cfg: Required<CoreConfig>;
  private readonly fr: FrameReader;
  private now = 0;
  private st: ConnState;
  private dirty = false;
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private subs = new Map<number, Subscription>();
  private lastRecv = 0;
  private pingId = 0;
  private pingSentAt = 0;
  private pingNonce = 0n;
  private hsDeadline = 0;
  private timersArmed = false;
  private held: number[] = [];
  private heldAway = false;
  private bytesIn = 0;
  private out = new Writer(1024);
  private completions: Completion[] = [];
  private deliveries: DeliveryBatch[] = [];
  private expired: Expiry[] = [];
  private ended: SubscriptionEnd[] = [];
  private redirects: Redirect[] = [];
  /** Frames with opcodes this version does not know, ignored. */
  unknownFrames = 0;

  /** Makes a connection; its first Ready holds the Handshake. */
  constructor(cfg: CoreConfig = {}) {
    this.cfg = {
      clientName: cfg.clientName ?? "",
      apiKey: cfg.apiKey ?? "",
      capabilities: cfg.capabilities ?? [],
      maxFrameSize: cfg.maxFrameSize && cfg.maxFrameSize > 0 ? cfg.maxFrameSize : DEFAULT_MAX_FRAME_SIZE,
      keepaliveIntervalMs: cfg.keepaliveIntervalMs || 30_000,
      keepaliveTimeoutMs: cfg.keepaliveTimeoutMs && cfg.keepaliveTimeoutMs > 0 ? cfg.keepaliveTimeoutMs : 10_000,
    };
    this.fr = new FrameReader(this.cfg.maxFrameSize);
    this.st = {
      handshaken: false,
      version: 0,
      nodeId: "",
      serverName: "",
      capabilities: [],
      serverMaxFrame: DEFAULT_MAX_FRAME_SIZE,
      maxBatchSize: MAX_BATCH_SIZE,
      goingAway: false,
      goAwayCode: Code.Ok,
      goAwayMessage: "",
      leaderHint: "",
      failed: false,
    };
    const hs = Handshake.make({
      maxVersion: PROTOCOL_VERSION,
      minVersion: MIN_PROTOCOL_VERSION,
      capabilities: this.cfg.capabilities,
      apiKey: this.cfg.apiKey,
      clientName: this.cfg.clientName,
      maxFrameSize: this.cfg.maxFrameSize,
    });
    const id = this.allocId();
    this.pending.set(id, { op: Opcode.Handshake, req: hs, internal: true });
    this.write(id, hs);
  }

  /** The current connection state (a copy). */
  state(): ConnState {
    return { ...this.st };
  }

  /** Requests awaiting a response, not counting subscriptions. */
  inFlight(): number {
    return this.pending.size;
  }

  private allocId(): number {
    for (;;) {
      const id = this.nextId;
      this.nextId = this.nextId === 0xffffffff ? 1 : this.nextId + 1;
      if (!this.pending.has(id) && !this.subs.has(id)) return id;
    }
  }

  private write(reqId: number, f: Frame): void {
    writeFrame(this.out, reqId, f, this.st.serverMaxFrame);
  }

  private usable(): void {
    if (this.st.failed) throw this.st.err ?? new GoingAwayError();
    if (this.st.goingAway) throw new GoingAwayError();
  }

  /**
   * Queues a request and returns its request ID; its Completion comes in a
   * later Ready. Subscribe and Unsubscribe go through their own methods.
   * Throws TypeError for a frame that is not a request, GoingAwayError
   * after GoAway, and the failure after the connection failed. Requests
   * made before HandshakeOk are written once it arrives.
   */
  send(f: Frame): number {
    this.usable();
    if (OPCODE_KINDS[f.op] !== "request") throw new TypeError(`fila: ${opcodeName(f.op)} is not a request frame`);
    if (f.op === Opcode.Subscribe || f.op === Opcode.Unsubscribe || f.op === Opcode.Handshake) {
      throw new TypeError(`fila: send ${opcodeName(f.op)}: use its own method`);
    }
    const id = this.allocId();
    this.pending.set(id, { op: f.op, req: f, internal: false });
    this.transmit(id, f);
    return id;
  }

  private transmit(id: number, f: Frame): void {
    if (!this.st.handshaken) {
      this.held.push(id);
      return;
    }
    this.write(id, f);
  }

  private release(): void {
    const held = this.held;
    this.held = [];
    for (const id of held) {
      const p = this.pending.get(id);
      if (p) this.transmit(id, p.req);
    }
    if (this.heldAway) {
      this.heldAway = false;
      this.write(0, GoAway.make({ code: Code.Ok, message: "client closing" }));
    }
  }

  /**
   * Opens a subscription and returns its ID (its request ID). prefetch is
   * the credit granted, the most deliveries the application holds
   * unsettled; 0 asks for the broker's cap. The Completion carries
   * SubscribeOk; deliveries follow in DeliveryBatches with this ID.
   */
  subscribe(queue: string, prefetch: number, rateLimits: RateLimit[] = []): number {
    return this.subscribeFrame(Subscribe.make({ queue, prefetch, rateLimits }));
  }

  /**
   * Opens a subscription with every field of its Subscribe frame given
   * (the later ones of the spec too), as subscribe does.
   */
  subscribeFrame(f: Subscribe): number {
    this.usable();
    const id = this.allocId();
    this.pending.set(id, { op: Opcode.Subscribe, req: f, internal: false });
    this.subs.set(id, {
      prefetch: f.prefetch,
      asked: f.prefetch,
      active: false,
      outstanding: f.prefetch,
      held: new Set(),
      unreturned: 0,
      debt: 0,
      unsubReq: 0,
    });
    this.transmit(id, f);
    return id;
  }

  /**
   * Closes subscription sub. Its Completion carries UnsubscribeOk, and its
   * SubscriptionEnd comes in the same Ready. Throws for a subscription that
   * is not open.
   */
  unsubscribe(sub: number): number {
    this.usable();
    const s = this.subs.get(sub);
    if (!s || !s.active) throw new RangeError(`fila: unknown subscription: ${sub}`);
    const f = Unsubscribe.make({ subscription: sub });
    const id = this.allocId();
    this.pending.set(id, { op: Opcode.Unsubscribe, req: f, internal: false });
    s.unsubReq = id;
    this.write(id, f);
    return id;
  }

  /**
   * Reports that the application has finished with these deliveries of
   * sub, so their credit can return. Credit goes back in Credit frames of
   * at least a quarter of the prefetch. A lease not held (settled before,
   * expired, never delivered) returns nothing. Call it before sending the
   * request that settles them, so the credit travels first.
   */
  settle(sub: number, leases: Iterable<bigint>): void {
    const s = this.subs.get(sub);
    if (!s) return;
    let n = 0;
    for (const l of leases) if (s.held.delete(l)) n++;
    if (n === 0 || s.prefetch === 0) return;
    s.unreturned += n;
    const pay = Math.min(s.debt, s.unreturned);
    s.debt -= pay;
    s.unreturned -= pay;
    if (
      s.unreturned >= Math.max(1, Math.floor(s.prefetch / 4)) &&
      s.active &&
      s.unsubReq === 0 &&
      !this.st.failed &&
      !this.st.goingAway
    ) {
      this.grant(sub, s, s.unreturned);
      s.unreturned = 0;
    }
  }

  private grant(id: number, s: Subscription, n: number): void {
    s.outstanding += n;
    this.write(0, Credit.make({ subscription: id, credits: n }));
  }

  /** sub's credit: what the broker may still deliver, and deliveries held unsettled. */
  credit(sub: number): { outstanding: number; held: number } | undefined {
    const s = this.subs.get(sub);
    return s ? { outstanding: s.outstanding, held: s.held.size } : undefined;
  }

  /**
   * Queues a GoAway: no new requests; the shell closes the connection once
   * inFlight() is 0.
   */
  close(): void {
    if (this.st.failed || this.st.goingAway) return;
    this.st.goingAway = true;
    this.dirty = true;
    if (!this.st.handshaken) {
      this.heldAway = true;
      return;
    }
    this.write(0, GoAway.make({ code: Code.Ok, message: "client closing" }));
  }

  /** Tells the core the time, in ms: it pings and times out on it. */
  tick(now: number): void {
    this.now = now;
    if (!this.timersArmed) {
      this.timersArmed = true;
      this.lastRecv = now;
      this.hsDeadline = now + this.cfg.keepaliveTimeoutMs;
    }
    if (this.st.failed) return;
    if (!this.st.handshaken) {
      if (now >= this.hsDeadline) {
        this.fail(new KeepaliveTimeoutError(`no handshake answer in ${formatMs(this.cfg.keepaliveTimeoutMs)}`));
      }
      return;
    }
    if (this.cfg.keepaliveIntervalMs < 0) return;
    if (this.pingId !== 0) {
      if (now - this.pingSentAt >= this.cfg.keepaliveTimeoutMs) {
        this.fail(new KeepaliveTimeoutError(`no pong in ${formatMs(this.cfg.keepaliveTimeoutMs)}`));
      }
      return;
    }
    if (now - this.lastRecv >= this.cfg.keepaliveIntervalMs) {
      this.pingNonce++;
      const p = Ping.make({ nonce: this.pingNonce });
      this.pingId = this.allocId();
      this.pingSentAt = now;
      this.pending.set(this.pingId, { op: Opcode.Ping, req: p, internal: true });
      this.write(this.pingId, p);
    }
  }

  private deadline(): number {
    if (this.st.failed || !this.timersArmed) return 0;
    if (!this.st.handshaken) return this.hsDeadline;
    if (this.cfg.keepaliveIntervalMs < 0) return 0;
    if (this.pingId !== 0) return this.pingSentAt + this.cfg.keepaliveTimeoutMs;
    return this.lastRecv + this.cfg.keepaliveIntervalMs;
  }

  /**
   * Feeds bytes read from the connection, in any split. Returns the
   * connection-scoped failure, if this or an earlier call failed it (the
   * failure is also in the next Ready); never throws.
   */
  receive(b: Uint8Array): Error | undefined {
    if (this.st.failed) return this.st.err;
    if (b.length === 0) return undefined;
    if (this.bytesIn === 0 && (b[0] === 0x15 || b[0] === 0x16) && (b.length < 2 || b[1] === 0x03)) {
      const e = new TLSRequiredError();
      this.fail(e);
      return e;
    }
    this.bytesIn += b.length;
    this.lastRecv = this.now;
    this.fr.feed(b);
    try {
      for (;;) {
        const fr = this.fr.next();
        if (!fr) return undefined;
        this.handle(fr.header.opcode, fr.header.requestId, fr.body);
        if (this.st.failed) return this.st.err;
      }
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      this.fail(err);
      return err;
    }
  }

  private violation(reason: string): never {
    throw new ConnError(Code.ProtocolViolation, reason);
  }

  private handle(op: number, reqId: number, body: Uint8Array): void {
    const codec = CODECS[op];
    if (!codec) {
      this.unknownFrames++;
      return;
    }
    let f: Frame;
    try {
      f = codec.decode(new Reader(body, OPCODE_NAMES[op]!));
    } catch (e) {
      throw new ConnError(Code.MalformedFrame, e instanceof Error ? e.message : String(e));
    }
    switch (f.op) {
      case Opcode.Ping:
        this.write(reqId, Pong.make({ nonce: f.nonce }));
        return;
      case Opcode.GoAway:
        this.st.goingAway = true;
        this.st.goAwayCode = f.code;
        this.st.goAwayMessage = f.message;
        this.st.leaderHint = f.leaderHint;
        this.dirty = true;
        return;
      case Opcode.Delivery:
        return this.deliver(reqId, f.messages, f.backlog);
      case Opcode.LeaseExpired:
        return this.leaseExpired(reqId, f.leases);
    }
    const kind = OPCODE_KINDS[op];
    if (kind === "request" || kind === "oneway") this.violation(`client-bound frame ${opcodeName(op)} is a request`);
    if (kind === "push") this.violation(`unexpected push ${opcodeName(op)}`);
    const p = this.pending.get(reqId);
    if (!p) {
      if (f.op === Opcode.ErrorFrame) {
        if (reqId === 0) throw new ConnError(f.code, f.message);
        const s = this.subs.get(reqId);
        if (s && s.active) {
          this.subs.delete(reqId);
          this.ended.push({ subscription: reqId, error: errorOf(f.code, f.message, f.leaderHint, "Subscribe") });
          return;
        }
      }
      this.violation(`${opcodeName(op)} for request ${reqId}, which is not in flight`);
    }
    this.pending.delete(reqId);
    if (f.op !== Opcode.ErrorFrame && op !== RESPONSE_OF[p.op]) {
      this.violation(
        `${opcodeName(op)} answers ${opcodeName(p.op)} request ${reqId}; want ${opcodeName(RESPONSE_OF[p.op] ?? 0)}`,
      );
    }
    if (f.op === Opcode.ErrorFrame) return this.failed(reqId, p, f.code, f.message, f.leaderHint);
    this.succeeded(reqId, p, f);
  }

  private failed(id: number, p: Pending, code: Code, message: string, hint: string): void {
    const err = errorOf(code, message, hint, OPCODE_NAMES[p.op] ?? "");
    switch (p.op) {
      case Opcode.Handshake:
        this.fail(new HandshakeError(err));
        return;
      case Opcode.Ping:
        if (p.internal) {
          this.pingId = 0;
          return;
        }
        break;
      case Opcode.Subscribe:
        this.subs.delete(id);
        break;
      case Opcode.Unsubscribe: {
        const s = this.subs.get((p.req as Unsubscribe).subscription);
        if (s) s.unsubReq = 0;
        break;
      }
    }
    if (code === Code.NotLeader) this.redirects.push({ requestId: id, op: p.op, request: p.req, leaderHint: hint });
    this.completions.push({ requestId: id, op: p.op, request: p.req, error: err });
  }

  private succeeded(id: number, p: Pending, f: Frame): void {
    switch (f.op) {
      case Opcode.HandshakeOk:
        if (f.version < MIN_PROTOCOL_VERSION || f.version > PROTOCOL_VERSION) {
          this.fail(new VersionError(f.version, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION));
          return;
        }
        this.st.handshaken = true;
        this.st.version = f.version;
        this.st.nodeId = f.nodeId;
        this.st.serverName = f.serverName;
        this.st.capabilities = f.capabilities;
        if (f.maxFrameSize >= MIN_MAX_FRAME_SIZE) this.st.serverMaxFrame = f.maxFrameSize;
        if (f.maxBatchSize > 0) this.st.maxBatchSize = Math.min(f.maxBatchSize, MAX_BATCH_SIZE);
        this.dirty = true;
        this.release();
        return;
      case Opcode.Pong:
        if (p.internal) {
          this.pingId = 0;
          return;
        }
        break;
      case Opcode.SubscribeOk: {
        const s = this.subs.get(id)!;
        if (s.asked > 0 && (f.prefetch === 0 || f.prefetch > s.asked)) {
          this.violation(`SubscribeOk grants prefetch ${f.prefetch} to subscription ${id}, which asked for ${s.asked}`);
        }
        s.active = true;
        if (f.prefetch !== s.asked) {
          if (s.asked === 0) {
            s.prefetch = f.prefetch + s.held.size;
            s.outstanding = f.prefetch;
          } else {
            const cut = s.asked - f.prefetch;
            s.prefetch -= cut;
            s.outstanding -= cut;
          }
        }
        break;
      }
      case Opcode.UnsubscribeOk: {
        const sub = (p.req as Unsubscribe).subscription;
        this.subs.delete(sub);
        this.ended.push({ subscription: sub });
        break;
      }
    }
    this.completions.push({ requestId: id, op: p.op, request: p.req, response: f });
  }

  private deliver(sub: number, messages: DeliveredMessage[], backlog: bigint): void {
    const s = this.subs.get(sub);
    if (!s || !s.active) this.violation(`delivery for subscription ${sub}, which is not open`);
    const n = messages.length;
    if (s.prefetch > 0 && n > s.outstanding) {
      this.violation(`delivery of ${n} messages to subscription ${sub} exceeds its credit ${s.outstanding}`);
    }
    for (const m of messages) {
      if (s.held.has(m.lease)) this.violation(`delivery to subscription ${sub} reuses lease ${m.lease}, which it holds`);
      s.held.add(m.lease);
    }
    if (s.prefetch > 0) s.outstanding -= n;
    this.deliveries.push({ subscription: sub, messages, backlog });
  }

  private leaseExpired(sub: number, leases: ExpiredLease[]): void {
    const s = this.subs.get(sub);
    if (!s || !s.active) this.violation(`LeaseExpired for subscription ${sub}, which is not open`);
    for (const l of leases) {
      const held = s.held.delete(l.lease);
      if (s.prefetch === 0) continue;
      s.outstanding++;
      if (!held) {
        // Settled before the expiry reached us: its credit came back
        // twice. Keep one from being returned.
        if (s.unreturned > 0) s.unreturned--;
        else s.debt++;
      }
    }
    this.expired.push({ subscription: sub, leases });
  }

  private fail(err: Error): void {
    if (this.st.failed) return;
    this.st.failed = true;
    this.st.err = err;
    this.dirty = true;
    const lost = new ConnectionLostError(err);
    for (const id of [...this.pending.keys()].sort((a, b) => a - b)) {
      const p = this.pending.get(id)!;
      if (!p.internal) this.completions.push({ requestId: id, op: p.op, request: p.req, error: lost });
    }
    this.pending.clear();
    this.held = [];
    this.heldAway = false;
    for (const id of [...this.subs.keys()].sort((a, b) => a - b)) {
      if (this.subs.get(id)!.active) this.ended.push({ subscription: id, error: lost });
    }
    this.subs.clear();
  }

  /**
   * Reports that the connection was lost (EOF or a socket error) and fails
   * it, completing everything in flight.
   */
  connLost(err: Error): void {
    this.fail(err);
  }

  /** Reports whether ready has anything for the shell. */
  hasReady(): boolean {
    return (
      this.out.length > 0 ||
      this.completions.length > 0 ||
      this.deliveries.length > 0 ||
      this.expired.length > 0 ||
      this.ended.length > 0 ||
      this.redirects.length > 0 ||
      this.dirty
    );
  }

  /** Returns what the core has for the shell; call advance after acting on it. */
  ready(): Ready {
    const rd: Ready = {
      out: this.out.bytes().slice(),
      completions: this.completions,
      deliveries: this.deliveries,
      expired: this.expired,
      ended: this.ended,
      redirects: this.redirects,
      deadline: this.deadline(),
    };
    if (this.dirty) rd.state = this.state();
    // Events made after this Ready go into the next one.
    this.completions = [];
    this.deliveries = [];
    this.expired = [];
    this.ended = [];
    this.redirects = [];
    return rd;
  }

  /** Acknowledges rd: its bytes are written and its events handled. */
  advance(rd: Ready): void {
    const n = rd.out.length;
    if (n === this.out.length) this.out.reset();
    else if (n > 0) {
      this.out.buf.copyWithin(0, n, this.out.length);
      this.out.length -= n;
    }
    if (rd.state) this.dirty = false;
  }
}

/** The broker refused the handshake; cause is its error (UNAUTHORIZED, UNSUPPORTED_VERSION). */
export class HandshakeError extends Error {
  /** Makes the error. */
  constructor(override readonly cause: FilaError) {
    super("fila: handshake: " + cause.message);
    this.name = "HandshakeError";
  }
}

/** The spec name of a code, re-exported for event rendering. */
export { codeName };
