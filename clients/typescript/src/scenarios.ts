/**
 * The conformance scenarios, ported from the Go scenarios of the same name
 * (conformance/scenario): each drives the client through one connection,
 * making its calls one after another, so that its frames come in the
 * transcript's order. Client mode runs them against the fake broker; the
 * live test runs them against a real fila-server.
 *
 * @module
 */

import { Client, Message } from "./client.js";
import type { Delivery, Subscription } from "./client.js";
import {
  ApiKeyNotFoundError,
  ForbiddenError,
  InternalError,
  InvalidArgumentError,
  InvalidConfigValueError,
  LeaseExpiredError,
  MessageNotFoundError,
  MessageTooLargeError,
  NotADlqError,
  NotSupportedError,
  QueueExistsError,
  QueueNotFoundError,
  ResourceExhaustedError,
  ScriptError,
  UnauthorizedError,
  UnavailableError,
} from "./errors_gen.js";
import { CODECS_BY_NAME, PermissionKind } from "./wire_gen.js";
import type { Frame } from "./wire_gen.js";
import { uuidString } from "./codec.js";

/**
 * Sends the request frame named name with fields in their JSON form (spec
 * names), for the operations added to the spec after the typed wrappers;
 * resolves with the response's fields by their camelCase names.
 */
async function req(c: Client, name: string, fields: Record<string, unknown>): Promise<Record<string, unknown>> {
  const codec = CODECS_BY_NAME[name];
  if (!codec) throw new Error(`no frame ${name} in this spec`);
  return (await c.admin.request<Frame>(codec.fromJSON(fields))) as unknown as Record<string, unknown>;
}

type ErrClass = abstract new (...args: never[]) => Error;

/** Collects a scenario's outcomes; the first unexpected one is its error. */
class Steps {
  err: Error | undefined;

  /** Awaits p: it must succeed (want undefined) or fail with an instance of want. */
  async want<T>(step: string, p: Promise<T>, want?: ErrClass): Promise<T | undefined> {
    try {
      const v = await p;
      if (want && !this.err) this.err = new Error(`${step}: succeeded; want ${want.name}`);
      return v;
    } catch (e) {
      if (!this.err && !(want && e instanceof want)) {
        this.err = new Error(`${step}: ${e instanceof Error ? e.message : String(e)}${want ? "; want " + want.name : ""}`);
      }
      return undefined;
    }
  }

  /** Records a condition on a step's result. */
  check(step: string, ok: boolean, what: string): void {
    if (!ok && !this.err) this.err = new Error(`${step}: ${what}`);
  }

  /** Throws the first failure. */
  done(): void {
    if (this.err) throw this.err;
  }
}

const WAIT_MS = 15_000;

async function next(sub: Subscription): Promise<Delivery> {
  let t: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    t = setTimeout(() => reject(new Error(`no delivery from ${sub.queue}`)), WAIT_MS);
  });
  try {
    const d = await Promise.race([sub.next(), timeout]);
    if (!d) throw new Error(`subscription to ${sub.queue} ended`);
    return d;
  } finally {
    clearTimeout(t);
  }
}

/** A scenario: it connects to addr and throws if anything went otherwise than expected. */
export type Scenario = (addr: string) => Promise<void>;

const connect = (addr: string, apiKey?: string) => Client.connect({ addr, apiKey });


/** A scenario of one client: connect, body, close. */
function withClient(body: (c: Client, st: Steps) => Promise<void>, apiKey?: string): Scenario {
  return async (addr) => {
    const c = await connect(addr, apiKey);
    const st = new Steps();
    await body(c, st);
    await st.want("close", c.close());
    st.done();
  };
}

/** Consume one message of a fresh queue q and settle it with how. */
function redeliver(
  q: string,
  payload: string,
  how: (d: Delivery) => Promise<void>,
  attempt: number,
  spec: Parameters<Client["admin"]["createQueue"]>[0] = { name: q },
): Scenario {
  return withClient(async (c, st) => {
    await st.want("create", c.admin.createQueue(spec));
    await st.want("send", c.producer.enqueue(q, payload));
    const sub = await c.consumer.subscribe(q, { prefetch: 1 });
    const d = await next(sub);
    await st.want("settle", how(d));
    const d2 = await next(sub);
    st.check("redelivery", d2.attempt === attempt, `attempt ${d2.attempt}`);
    await st.want("ack", d2.ack());
  });
}

function oneCall(call: (c: Client) => Promise<unknown>, want?: ErrClass): Scenario {
  return withClient(async (c, st) => {
    await st.want("call", call(c), want);
  });
}

function failedPing(): Scenario {
  return async (addr) => {
    const c = await connect(addr);
    try {
      let ok = true;
      try {
        await c.ping();
      } catch {
        ok = false;
      }
      if (ok) throw new Error("ping succeeded; want it to fail");
    } finally {
      await c.close();
    }
  };
}

/** The scenarios, by transcript name. */
export const scenarios: Record<string, Scenario> = {
  "session/connect_ping_close": withClient(async (c, st) => {
    await st.want("ping", c.ping());
  }),

  "admin/queue_lifecycle": withClient(async (c, st) => {
    const q = "adm.lifecycle";
    await st.want("create", c.admin.createQueue({ name: q, visibilityTimeoutMs: 45_000n, maxAttempts: 5 }));
    await st.want("create again", c.admin.createQueue({ name: q }), QueueExistsError);
    const qs = await st.want("list", c.admin.listQueues());
    st.check("list", qs?.length === 2, `got ${qs?.length} queues`);
    await st.want("stats", c.admin.queueStats(q));
    await st.want("send", c.producer.send(new Message(q, "hello").fairnessKey("acme").weight(2)));
    await st.want("stats after send", c.admin.queueStats(q));
    await st.want("delete", c.admin.deleteQueue(q));
    await st.want("delete again", c.admin.deleteQueue(q), QueueNotFoundError);
    await st.want("stats after delete", c.admin.queueStats(q), QueueNotFoundError);
  }),

  "admin/tenants": withClient(async (c, st) => {
    const q = "adm.tenants";
    await st.want("create", c.admin.createQueue({ name: q, tenantSeparator: "/", costByTime: true }));
    for (const k of ["acme/a", "acme/b", "acme/a", "solo"]) {
      await st.want("send " + k, c.producer.send(new Message(q, "x").fairnessKey(k)));
    }
    const s = await st.want("stats", c.admin.queueStats(q));
    if (s) {
      const shares = new Map(s.fairnessKeys.map((k) => [k.key, k.entitledShare]));
      st.check(
        "stats",
        s.policy === "stfq" &&
          s.tenantSeparator === "/" &&
          s.costByTime &&
          shares.get("acme/a") === 0.25 &&
          shares.get("acme/b") === 0.25 &&
          shares.get("solo") === 0.5,
        "unexpected stats",
      );
    }
    await st.want("delete", c.admin.deleteQueue(q));
  }),

  "admin/explain": withClient(async (c, st) => {
    const q = "adm.explain";
    await st.want("create", c.admin.createQueue({ name: q }));
    const id1 = (await st.want("send first", c.producer.send(new Message(q, "a").fairnessKey("acme")))) ?? "";
    const id2 = (await st.want("send second", c.producer.send(new Message(q, "b").fairnessKey("acme")))) ?? "";
    const e1 = await st.want("explain first", c.admin.explain(q, id1));
    st.check("explain first", e1?.reason === "no-credit", `got ${e1?.reason}`);
    const e2 = await st.want("explain second", c.admin.explain(q, id2));
    st.check("explain second", e2?.reason === "behind-key" && e2.ahead === 1n, `got ${e2?.reason}`);
    await st.want(
      "explain unknown",
      c.admin.explain(q, "01000000-0000-0000-0000-000000000000"),
      MessageNotFoundError,
    );
    await st.want("explain no queue", c.admin.explain("adm.explain.none", id1), QueueNotFoundError);
    await st.want("delete", c.admin.deleteQueue(q));
  }),

  "admin/create_queue_errors": withClient(async (c, st) => {
    await st.want("bad name", c.admin.createQueue({ name: "adm bad name" }), InvalidArgumentError);
    await st.want("dlq name", c.admin.createQueue({ name: "adm.errors.dlq" }), InvalidArgumentError);
    await st.want(
      "bad script",
      c.admin.createQueue({ name: "adm.errors", onEnqueue: "function on_enqueue(msg)\n  return {\nend" }),
      ScriptError,
    );
    await st.want(
      "separator on drr",
      c.admin.createQueue({ name: "adm.errors", policy: "drr", tenantSeparator: "/" }),
      InvalidArgumentError,
    );
  }),

  "admin/runtime_config": withClient(async (c, st) => {
    const k = "throttle.adm.cfg.stripe";
    await st.want("set", c.admin.setConfig(k, "10,20"));
    await st.want("set other", c.admin.setConfig("adm.cfg.region", "eu"));
    const v = await st.want("get", c.admin.getConfig(k));
    st.check("get", v?.found === true && v.value === "10,20", "wrong value");
    const es = await st.want("list", c.admin.listConfig("throttle.adm.cfg."));
    st.check("list", es?.length === 1, `got ${es?.length} entries`);
    await st.want("set bad throttle", c.admin.setConfig(k, "fast"), InvalidConfigValueError);
    st.check("delete", (await st.want("delete", c.admin.deleteConfig(k))) === true, "existed = false");
    st.check("delete again", (await st.want("delete again", c.admin.deleteConfig(k))) === false, "existed = true");
    const g = await st.want("get deleted", c.admin.getConfig(k));
    st.check("get deleted", g?.found === false, "found");
  }),

  "admin/api_keys": withClient(async (c, st) => {
    const key = await st.want(
      "create key",
      c.admin.createApiKey("ci", [{ kind: PermissionKind.Produce, pattern: "orders.*" }]),
    );
    const ks = await st.want("list keys", c.admin.listApiKeys());
    st.check("list keys", ks?.length === 1, `got ${ks?.length} keys`);
    const id = key?.keyId ?? "";
    await st.want(
      "set acl",
      c.admin.setAcl(id, [
        { kind: PermissionKind.Consume, pattern: "orders.eu" },
        { kind: PermissionKind.Admin, pattern: "orders.eu" },
      ]),
    );
    await st.want("get acl", c.admin.getAcl(id));
    await st.want("revoke", c.admin.revokeApiKey(id));
    await st.want("revoke again", c.admin.revokeApiKey(id), ApiKeyNotFoundError);
    await st.want("get acl of a revoked key", c.admin.getAcl(id), ApiKeyNotFoundError);
  }),

  "auth/unauthorized": async (addr) => {
    const st = new Steps();
    await st.want("connect", connect(addr, "not-a-key"), UnauthorizedError);
    st.done();
  },

  "auth/bootstrap_key": withClient(async (c, st) => {
    await st.want("create", c.admin.createQueue({ name: "au.bootstrap" }));
    await st.want("send", c.producer.enqueue("au.bootstrap", "signed"));
  }, "conformance-bootstrap-key"),

  "admin/cluster_status": withClient(async (c, st) => {
    const cs = await st.want("cluster status", c.admin.clusterStatus());
    st.check(
      "cluster status",
      !cs || (cs.nodeId === 0n && cs.nodes.length === 0 && cs.groups.length === 0),
      "not a single node",
    );
  }),

  "admin/move_queue": oneCall((c) => c.admin.moveQueue("adm.move", [2n, 3n, 4n]), NotSupportedError),

  "admin/drain_node": withClient(async (c, st) => {
    await st.want("drain node", c.admin.drainNode(2n), NotSupportedError);
    await st.want("undrain node", c.admin.undrainNode(2n), NotSupportedError);
  }),

  "admin/membership": withClient(async (c, st) => {
    await st.want("rebalance dry run", c.admin.rebalance(true), NotSupportedError);
    await st.want("rebalance", c.admin.rebalance(false), NotSupportedError);
    await st.want("add node", c.admin.addNode(4n, "10.0.0.4:5556"), NotSupportedError);
    await st.want("remove node", c.admin.removeNode(3n), NotSupportedError);
  }),

  "admin/redrive": withClient(async (c, st) => {
    const q = "adm.redrive";
    await st.want("create", c.admin.createQueue({ name: q, maxAttempts: 1 }));
    await st.want("send", c.producer.enqueue(q, "job"));
    const sub = await c.consumer.subscribe(q, { prefetch: 1 });
    let d = await next(sub);
    await st.want("nack", d.nack("boom"));
    const n = await st.want("redrive", c.admin.redrive(q + ".dlq", 0n));
    st.check("redrive", n === 1n, `moved ${n}`);
    d = await next(sub);
    st.check("redelivery", d.attempt === 1, `attempt ${d.attempt}`);
    await st.want("ack", d.ack());
    await st.want("redrive a queue", c.admin.redrive(q, 0n), NotADlqError);
    await st.want("redrive a missing dlq", c.admin.redrive("adm.no-such-queue.dlq", 0n), QueueNotFoundError);
    await st.want("unsubscribe", sub.close());
  }),

  "admin/delete_queue_ends_subscription": withClient(async (c, st) => {
    const q = "adm.delete-sub";
    await st.want("create", c.admin.createQueue({ name: q }));
    const sub = await c.consumer.subscribe(q, { prefetch: 4 });
    await st.want("delete", c.admin.deleteQueue(q));
    const err = await sub.ended;
    st.check("subscription end", err instanceof QueueNotFoundError, `ended with ${err?.message}`);
  }),

  "hotpath/enqueue_consume": withClient(async (c, st) => {
    const q = "hp.enqueue-consume";
    await st.want("create", c.admin.createQueue({ name: q }));
    const id = await st.want(
      "send",
      c.producer.send(new Message(q, "hello").header("tenant", "acme").fairnessKey("acme").weight(3)),
    );
    const sub = await c.consumer.subscribe(q, { prefetch: 1 });
    const d = await next(sub);
    st.check(
      "delivery",
      d.id === id && d.text() === "hello" && d.header("tenant") === "acme" && d.attempt === 1,
      `got ${d.id} ${d.text()} attempt ${d.attempt}`,
    );
    await st.want("ack", d.ack());
    await st.want("unsubscribe", sub.close());
  }),

  "hotpath/enqueue_batch_partial": withClient(async (c, st) => {
    const q = "hp.batch-partial";
    await st.want("create", c.admin.createQueue({ name: q }));
    const rs = await st.want(
      "send batch",
      c.producer.sendBatch([
        new Message(q, "one"),
        new Message("hp.no-such-queue", "two"),
        new Message(q, "three").header("fila-attempts", "9"),
        new Message(q, "four"),
      ]),
    );
    if (rs) {
      st.check("result 0", !rs[0]!.error, String(rs[0]!.error));
      st.check("result 1", rs[1]!.error instanceof QueueNotFoundError, String(rs[1]!.error));
      st.check("result 2", rs[2]!.error instanceof InvalidArgumentError, String(rs[2]!.error));
      st.check("result 3", !rs[3]!.error, String(rs[3]!.error));
    }
  }),

  "hotpath/message_too_large": withClient(async (c, st) => {
    const q = "hp.too-large";
    await st.want("create", c.admin.createQueue({ name: q }));
    await st.want("send", c.producer.enqueue(q, new Uint8Array(9000).fill(0x78)), MessageTooLargeError);
  }),

  "hotpath/continuation": withClient(async (c, st) => {
    const q = "hp.continuation";
    await st.want("create", c.admin.createQueue({ name: q }));
    const payload = "0123456789".repeat(600);
    await st.want("send", c.producer.enqueue(q, payload));
    const sub = await c.consumer.subscribe(q, { prefetch: 1 });
    const d = await next(sub);
    st.check("delivery", d.text() === payload, `payload of ${d.payload.length} bytes`);
    await st.want("ack", d.ack());
  }),

  "hotpath/ack_twice": withClient(async (c, st) => {
    const q = "hp.ack-twice";
    await st.want("create", c.admin.createQueue({ name: q }));
    await st.want("send", c.producer.enqueue(q, "once"));
    const sub = await c.consumer.subscribe(q, { prefetch: 2 });
    const d = await next(sub);
    await st.want("ack", d.ack());
    await st.want("ack again", d.ack(), MessageNotFoundError);
  }),

  "hotpath/ack_batch_partial": withClient(async (c, st) => {
    const q = "hp.ack-batch";
    await st.want("create", c.admin.createQueue({ name: q }));
    await st.want("send", c.producer.sendBatch([new Message(q, "a"), new Message(q, "b")]));
    const sub = await c.consumer.subscribe(q, { prefetch: 2 });
    const d1 = await next(sub);
    const d2 = await next(sub);
    await st.want("ack first", d1.ack());
    await st.want("ack both", c.consumer.ackAll([d1, d2]), MessageNotFoundError);
  }),

  "hotpath/nack_retry": redeliver("hp.nack-retry", "flaky", (d) => d.nack("downstream timeout"), 2, {
    name: "hp.nack-retry",
    backoffBaseMs: 10n,
    backoffMaxMs: 10n,
  }),
  "hotpath/retry_after": redeliver("hp.retry-after", "rate limited", (d) => d.retryAfter(50), 2),
  "hotpath/release": redeliver("hp.release", "not now", (d) => d.release(), 1),

  "hotpath/extend_lease": withClient(async (c, st) => {
    const q = "hp.extend";
    await st.want("create", c.admin.createQueue({ name: q }));
    await st.want("send", c.producer.enqueue(q, "long job"));
    const sub = await c.consumer.subscribe(q, { prefetch: 1 });
    const d = await next(sub);
    await st.want("extend", d.extendLease(120_000));
    await st.want("ack", d.ack());
  }),

  "hotpath/idempotency": withClient(async (c, st) => {
    const q = "hp.idempotency";
    await st.want("create", c.admin.createQueue({ name: q }));
    const rs = await st.want(
      "send",
      c.producer.sendBatch([
        new Message(q, "charge").idempotencyKey("order-17"),
        new Message(q, "charge again").idempotencyKey("order-17"),
      ]),
    );
    const rs2 = await st.want("send later", c.producer.sendBatch([new Message(q, "charge later").idempotencyKey("order-17")]));
    if (rs?.length === 2 && rs2?.length === 1) {
      st.check(
        "duplicates",
        !rs[0]!.duplicate && rs[1]!.duplicate && rs2[0]!.duplicate && rs[1]!.id === rs[0]!.id && rs2[0]!.id === rs[0]!.id,
        "not deduplicated",
      );
    }
  }),

  "hotpath/delay": withClient(async (c, st) => {
    const q = "hp.delay";
    await st.want("create", c.admin.createQueue({ name: q }));
    const sub = await c.consumer.subscribe(q, { prefetch: 1 });
    await st.want("send", c.producer.send(new Message(q, "later").delay(200)));
    const d = await next(sub);
    await st.want("ack", d.ack());
  }),

  "credit/exhaustion_replenish": withClient(async (c, st) => {
    const q = "cr.exhaustion";
    await st.want("create", c.admin.createQueue({ name: q }));
    await st.want("send", c.producer.sendBatch(["m1", "m2", "m3"].map((p) => new Message(q, p))));
    const sub = await c.consumer.subscribe(q, { prefetch: 2 });
    const ds = [await next(sub), await next(sub)];
    await st.want("ack m1", ds[0]!.ack());
    const d = await next(sub);
    st.check("third", d.text() === "m3", `got ${d.text()}`);
    await st.want("ack m2", ds[1]!.ack());
    await st.want("ack m3", d.ack());
  }),

  "credit/two_subscriptions": withClient(async (c, st) => {
    const qa = "cr.two.orders";
    const qb = "cr.two.billing";
    await st.want("create a", c.admin.createQueue({ name: qa }));
    await st.want("create b", c.admin.createQueue({ name: qb }));
    const sa = await c.consumer.subscribe(qa, { prefetch: 1 });
    const sb = await c.consumer.subscribe(qb, { prefetch: 1 });
    for (let round = 0; round < 2; round++) {
      await st.want(
        "send",
        c.producer.sendBatch([new Message(qa, `order ${round}`), new Message(qb, `invoice ${round}`)]),
      );
      const da = await next(sa);
      const db = await next(sb);
      await st.want("ack b", db.ack());
      await st.want("ack a", da.ack());
    }
    await st.want("unsubscribe a", sa.close());
    await st.want("unsubscribe b", sb.close());
  }),

  "credit/unlimited": withClient(async (c, st) => {
    const q = "cr.unlimited";
    await st.want("create", c.admin.createQueue({ name: q }));
    await st.want("send", c.producer.sendBatch(["u1", "u2", "u3"].map((p) => new Message(q, p))));
    const sub = await c.consumer.subscribe(q, { prefetch: 0 });
    st.check("granted", sub.prefetch === 2, `granted ${sub.prefetch}`);
    const ds = [await next(sub), await next(sub)];
    await st.want("ack u1", ds[0]!.ack());
    const d = await next(sub);
    st.check("third", d.text() === "u3", `got ${d.text()}`);
    await st.want("ack u2 and u3", c.consumer.ackAll([ds[1]!, d]));
  }),

  "credit/lease_expiry_returns_credit": withClient(async (c, st) => {
    const q = "cr.lease-expiry";
    await st.want("create", c.admin.createQueue({ name: q, backoffBaseMs: 60_000n, backoffMaxMs: 60_000n }));
    await st.want("send", c.producer.sendBatch(["e1", "e2", "e3", "e4"].map((p) => new Message(q, p))));
    const sub = await c.consumer.subscribe(q, { prefetch: 2 });
    const ds: Delivery[] = [];
    for (let i = 0; i < 4; i++) ds.push(await next(sub));
    st.check("after the expiry", ds[2]!.text() === "e3" && ds[3]!.text() === "e4", "wrong order");
    await st.want("ack expired e1", ds[0]!.ack(), LeaseExpiredError);
    await st.want("ack e3", ds[2]!.ack());
    await st.want("ack e4", ds[3]!.ack());
  }),

  "credit/unsubscribe_then_ack": withClient(async (c, st) => {
    const q = "cr.unsub-ack";
    await st.want("create", c.admin.createQueue({ name: q }));
    await st.want("send", c.producer.enqueue(q, "keep"));
    const sub = await c.consumer.subscribe(q, { prefetch: 1 });
    const d = await next(sub);
    await st.want("unsubscribe", sub.close());
    await st.want("ack", d.ack());
  }),

  "lease/expiry_redelivery": withClient(async (c, st) => {
    const q = "ls.expiry";
    await st.want("create", c.admin.createQueue({ name: q }));
    await st.want("send", c.producer.enqueue(q, "slow"));
    const sub = await c.consumer.subscribe(q, { prefetch: 2 });
    const d1 = await next(sub);
    const d2 = await next(sub);
    st.check("redelivery", d2.id === d1.id && d2.attempt === 2, `attempt ${d2.attempt}`);
    await st.want("ack old lease", d1.ack(), LeaseExpiredError);
    await st.want("ack new lease", d2.ack());
  }),

  "lease/expiry_dead_letter": withClient(async (c, st) => {
    const q = "ls.dead-letter";
    await st.want("create", c.admin.createQueue({ name: q, maxAttempts: 1 }));
    await st.want("send", c.producer.enqueue(q, "doomed"));
    const sub = await c.consumer.subscribe(q, { prefetch: 1 });
    await next(sub);
    const dlq = await c.consumer.subscribe(q + ".dlq", { prefetch: 1 });
    const d = await next(dlq);
    st.check("dead letter", d.header("fila-attempts") === "1", "no fila-attempts header");
    await st.want("ack", d.ack());
  }),

  "admin/purge_peek": withClient(async (c, st) => {
    const q = "adm.purge";
    await st.want("create", c.admin.createQueue({ name: q }));
    for (const p of ["one", "two", "three"]) await st.want("send", c.producer.enqueue(q, p));
    const sub = await c.consumer.subscribe(q, { prefetch: 1, more: { leaseTimeoutMs: 3_600_000n } as object });
    const d = await next(sub);
    type Peeked = { id: Uint8Array; state: string; preview: Uint8Array };
    let page = await st.want("peek", req(c, "Peek", { queue: q, count: 2 }));
    if (page) {
      const ms = page.messages as Peeked[];
      const nextAfter = page.nextAfter as Uint8Array;
      st.check(
        "peek",
        ms.length === 2 &&
          uuidString(nextAfter) === uuidString(ms[1]!.id) &&
          ms[0]!.state === "leased" &&
          new TextDecoder().decode(ms[1]!.preview) === "two",
        "unexpected page",
      );
      page = await st.want("peek after", req(c, "Peek", { queue: q, count: 2, after: uuidString(nextAfter) }));
      st.check(
        "peek after",
        page !== undefined && (page.messages as Peeked[]).length === 1 && uuidString(page.nextAfter as Uint8Array) === uuidString(new Uint8Array(16)),
        "unexpected page",
      );
    }
    const purged = await st.want("purge", req(c, "PurgeQueue", { name: q }));
    st.check("purge", purged?.purged === 2n, `purged ${String(purged?.purged)}`);
    const rest = await st.want("peek purged", req(c, "Peek", { queue: q }));
    st.check(
      "peek purged",
      rest !== undefined && (rest.messages as Peeked[]).length === 1 && uuidString((rest.messages as Peeked[])[0]!.id) === d.id,
      "unexpected page",
    );
    await st.want("ack", d.ack());
    await st.want("purge a missing queue", req(c, "PurgeQueue", { name: "adm.no-such-queue" }), QueueNotFoundError);
    await st.want("peek a missing queue", req(c, "Peek", { queue: "adm.no-such-queue" }), QueueNotFoundError);
    await st.want("unsubscribe", sub.close());
  }),

  "admin/redrive_throttled": withClient(async (c, st) => {
    const q = "adm.redrive-rate";
    await st.want("create", c.admin.createQueue({ name: q, maxAttempts: 1 }));
    for (const k of ["a", "b", "a"]) await st.want("send", c.producer.send(new Message(q, k).fairnessKey(k)));
    const sub = await c.consumer.subscribe(q, { prefetch: 3 });
    for (let i = 0; i < 3; i++) await st.want("nack", (await next(sub)).nack("boom"));
    const r = await st.want("redrive", req(c, "Redrive", { dead_letter_queue: q + ".dlq", rate: 1, fairness_key: "a" }));
    st.check("redrive", r?.moved === 1n && r.pending === 1n, "unexpected status");
    const r2 = await st.want("cancel", req(c, "Redrive", { dead_letter_queue: q + ".dlq", cancel: true }));
    st.check("cancel", r2 !== undefined && (r2.moved as bigint) + (r2.pending as bigint) === 2n, "unexpected status");
    await st.want("unsubscribe", sub.close());
  }),

  "hotpath/ttl_priority": withClient(async (c, st) => {
    const q = "hp.ttl";
    await st.want("create", c.admin.createQueue({ name: q, messageTtlMs: 3_600_000n }));
    await st.want(
      "send",
      c.producer.sendBatch([
        new Message(q, "expires").ttl(100).priority(9),
        new Message(q, "low").priority(0),
        new Message(q, "high").priority(7),
      ]),
    );
    const dlq = await c.consumer.subscribe(q + ".dlq", { prefetch: 1 });
    const d = await next(dlq);
    st.check("expired", d.text() === "expires" && d.header("fila-error") === "expired", `got ${d.text()}`);
    await st.want("ack expired", d.ack());
    const sub = await c.consumer.subscribe(q, { prefetch: 1 });
    for (const want of ["high", "low"]) {
      const d = await next(sub);
      st.check("priority order", d.text() === want, `got ${d.text()}, want ${want}`);
      await st.want("ack " + want, d.ack());
    }
  }),

  // ---- the hand-written transcripts ----
  "errors/unavailable_goaway": async (addr) => {
    const c = await connect(addr);
    const st = new Steps();
    await st.want("send", c.producer.enqueue("er.shutdown", "x"), UnavailableError);
    await c.close();
    st.done();
  },
  "errors/internal": oneCall((c) => c.admin.createQueue({ name: "er.internal" }), InternalError),
  "errors/not_supported": oneCall((c) => c.admin.listQueues(), NotSupportedError),
  "errors/resource_exhausted": oneCall((c) => c.consumer.subscribe("er.busy", { prefetch: 1 }), ResourceExhaustedError),
  "errors/forbidden": withClient(async (c, st) => {
    const rs = await st.want("send", c.producer.sendBatch([new Message("er.billing", "invoice")]));
    if (rs?.length === 1) st.check("send result", rs[0]!.error instanceof ForbiddenError, String(rs[0]!.error));
    await st.want("stats", c.admin.queueStats("er.billing"), ForbiddenError);
  }, "fila_producer_orders"),

  "cluster/move_queue": withClient(async (c, st) => {
    await st.want("move queue", c.admin.moveQueue("cl.orders", [2n, 3n, 4n]));
    const cs = await st.want("cluster status", c.admin.clusterStatus());
    if (cs) {
      const g = cs.groups[1];
      const moving =
        cs.groups.length === 2 &&
        g !== undefined &&
        g.target.join(",") === "2,3,4" &&
        g.replicas.length === 4 &&
        g.replicas[3]!.learner &&
        !g.replicas[0]!.learner;
      st.check("cluster status", moving && cs.groups[0]!.target.length === 0, "not moving");
    }
  }),
  "cluster/drain_node": withClient(async (c, st) => {
    const r = await st.want("drain node", c.admin.drainNode(3n));
    st.check("drain node", !r || r.queues === 2, `planned ${r?.queues} queues`);
    const cs = await st.want("cluster status", c.admin.clusterStatus());
    if (cs) {
      const states = cs.nodes.map((n) => n.state).join(",");
      const moving =
        cs.groups.length === 3 &&
        cs.groups[0]!.target.length === 0 &&
        cs.groups[1]!.target.join(",") === "1,2,4" &&
        cs.groups[2]!.target.join(",") === "1,2,4";
      st.check("cluster status", moving && states === "active,active,draining,active", "not draining");
    }
    await st.want("undrain node", c.admin.undrainNode(3n));
  }),
  "cluster/membership": withClient(async (c, st) => {
    await st.want("add node", c.admin.addNode(4n, "10.0.0.4:5556"));
    const plan = await st.want("rebalance dry run", c.admin.rebalance(true));
    if (plan) {
      const m = plan.moves[0];
      const l = plan.leads[0];
      st.check(
        "rebalance dry run",
        plan.moves.length === 1 &&
          m?.queue === "orders" &&
          m.fromNodeId === 1n &&
          m.toNodeId === 4n &&
          plan.leads.length === 1 &&
          l?.queue === "orders" &&
          l.nodeId === 4n,
        "unexpected plan",
      );
    }
    await st.want("rebalance", c.admin.rebalance(false));
    const cs = await st.want("cluster status", c.admin.clusterStatus());
    if (cs) {
      const p = cs.pending[0];
      st.check(
        "cluster status",
        cs.pending.length === 1 &&
          p?.queue === "billing" &&
          p.fromNodeId === 2n &&
          p.toNodeId === 4n &&
          cs.groups.length === 2 &&
          cs.groups[1]!.preferredLeader === 4n,
        "unexpected status",
      );
    }
    await st.want("remove node", c.admin.removeNode(3n), InvalidArgumentError);
    await st.want("remove drained node", c.admin.removeNode(5n));
  }),

  "robustness/server_ping": oneCall((c) => c.ping()),
  "robustness/unknown_push": oneCall((c) => c.ping()),
  "robustness/truncated_server_frame": failedPing(),
  "robustness/oversized_server_frame": failedPing(),
  "robustness/delivery_beyond_credit": async (addr) => {
    const c = await connect(addr);
    try {
      const sub = await c.consumer.subscribe("rb.credit", { prefetch: 1 });
      const err = await sub.ended;
      if (!err) throw new Error("the subscription ended without an error");
    } finally {
      await c.close();
    }
  },
  "robustness/server_version_mismatch": async (addr) => {
    let c: Client | undefined;
    try {
      c = await connect(addr);
    } catch {
      return;
    }
    await c.close();
    throw new Error("connect succeeded with protocol version 9");
  },
};

/** The names of the scenarios this driver runs, sorted. */
export function scenarioNames(): string[] {
  return Object.keys(scenarios).sort();
}

