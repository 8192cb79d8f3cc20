import { test } from "node:test";
import assert from "node:assert/strict";

import { Conn, ConnectionLostError, KeepaliveTimeoutError } from "../core.js";
import type { Ready } from "../core.js";
import { Code, QueueNotFoundError, NotLeaderError } from "../errors_gen.js";
import { encodeFrame, FrameReader } from "../frames.js";
import { Reader } from "../codec.js";
import * as w from "../wire_gen.js";

/** Drains c: the frames it wrote, decoded, and its Readys. */
function drain(c: Conn): { frames: [number, w.Frame][]; rds: Ready[] } {
  const frames: [number, w.Frame][] = [];
  const rds: Ready[] = [];
  const fr = new FrameReader();
  while (c.hasReady()) {
    const rd = c.ready();
    fr.feed(rd.out);
    rds.push(rd);
    c.advance(rd);
  }
  for (let f = fr.next(); f; f = fr.next()) {
    frames.push([f.header.requestId, w.CODECS[f.header.opcode]!.decode(new Reader(f.body, "x"))]);
  }
  return { frames, rds };
}

function handshaken(): Conn {
  const c = new Conn({ clientName: "t" });
  c.tick(0);
  const { frames } = drain(c);
  assert.equal(frames[0]![1].op, w.Opcode.Handshake);
  c.receive(encodeFrame(1, w.HandshakeOk.make({ version: 1, nodeId: "n", maxFrameSize: 16 << 20, serverName: "s" })));
  const { rds } = drain(c);
  assert.ok(rds.some((r) => r.state?.handshaken));
  return c;
}

function deliver(c: Conn, sub: number, leases: bigint[]): void {
  const messages = leases.map((lease) => w.DeliveredMessage.make({ id: new Uint8Array(16).fill(Number(lease)), queue: "q", lease }));
  c.receive(encodeFrame(sub, w.Delivery.make({ messages })));
}

test("requests made before HandshakeOk are held, then sent in order", () => {
  const c = new Conn();
  c.tick(0);
  const id = c.send(w.CreateQueue.make({ name: "q" }));
  assert.equal(id, 2);
  assert.equal(drain(c).frames.length, 1); // the Handshake only
  c.receive(encodeFrame(1, w.HandshakeOk.make({ version: 1, maxFrameSize: 16 << 20 })));
  const { frames } = drain(c);
  assert.deepEqual(frames.map(([r, f]) => [r, f.op]), [[2, w.Opcode.CreateQueue]]);
});

test("an Error completes its request with the code's error class", () => {
  const c = handshaken();
  const id = c.send(w.DeleteQueue.make({ name: "q" }));
  drain(c);
  c.receive(encodeFrame(id, w.ErrorFrame.make({ code: Code.QueueNotFound, message: "queue not found: q" })));
  const { rds } = drain(c);
  const cp = rds.flatMap((r) => r.completions)[0]!;
  assert.equal(cp.requestId, id);
  assert.ok(cp.error instanceof QueueNotFoundError);
});

test("credit returns in Credit frames of at least a quarter of the prefetch", () => {
  const c = handshaken();
  const sub = c.subscribe("q", 8);
  drain(c);
  c.receive(encodeFrame(sub, w.SubscribeOk.make({ prefetch: 8 })));
  deliver(c, sub, [1n, 2n, 3n]);
  drain(c);
  c.settle(sub, [1n]);
  assert.equal(drain(c).frames.length, 0, "one settled of 8: below a quarter");
  c.settle(sub, [2n]);
  const { frames } = drain(c);
  assert.deepEqual(frames, [[0, w.Credit.make({ subscription: sub, credits: 2 })]]);
  c.settle(sub, [2n]); // settled twice: nothing more
  assert.equal(drain(c).frames.length, 0);
  assert.deepEqual(c.credit(sub), { outstanding: 7, held: 1 });
});

test("no credit for a delivery whose lease expired: the broker returned it", () => {
  const c = handshaken();
  const sub = c.subscribe("q", 1);
  drain(c);
  c.receive(encodeFrame(sub, w.SubscribeOk.make({ prefetch: 1 })));
  deliver(c, sub, [5n]);
  c.receive(encodeFrame(sub, w.LeaseExpired.make({ leases: [{ id: new Uint8Array(16).fill(5), lease: 5n }] })));
  const { rds } = drain(c);
  assert.equal(rds.flatMap((r) => r.expired).length, 1);
  c.settle(sub, [5n]);
  assert.equal(drain(c).frames.length, 0);
  assert.deepEqual(c.credit(sub), { outstanding: 1, held: 0 });
});

test("a delivery beyond credit fails the connection and everything in flight", () => {
  const c = handshaken();
  const sub = c.subscribe("q", 1);
  const ping = c.send(w.Ping.make({ nonce: 3n }));
  drain(c);
  c.receive(encodeFrame(sub, w.SubscribeOk.make({ prefetch: 1 })));
  deliver(c, sub, [1n, 2n]);
  const { rds } = drain(c);
  const st = rds.find((r) => r.state?.failed)!.state!;
  assert.match(st.err!.message, /exceeds its credit 1/);
  assert.ok(rds.flatMap((r) => r.completions).some((cp) => cp.requestId === ping && cp.error instanceof ConnectionLostError));
  assert.ok(rds.flatMap((r) => r.ended).some((e) => e.subscription === sub && e.error instanceof ConnectionLostError));
});

test("the broker's Ping is answered, and keepalive pings on the core's clock", () => {
  const c = handshaken();
  c.receive(encodeFrame(9, w.Ping.make({ nonce: 42n })));
  assert.deepEqual(drain(c).frames, [[9, w.Pong.make({ nonce: 42n })]]);
  c.tick(30_000);
  const { frames } = drain(c);
  assert.equal(frames[0]![1].op, w.Opcode.Ping);
  c.tick(40_000);
  const { rds } = drain(c);
  assert.ok(rds.find((r) => r.state?.failed)?.state?.err instanceof KeepaliveTimeoutError);
});

test("NOT_LEADER surfaces as a redirect with the leader's address", () => {
  const c = handshaken();
  const id = c.send(w.Enqueue.make({ messages: [w.EnqueueMessage.make({ queue: "q" })] }));
  drain(c);
  c.receive(encodeFrame(id, w.ErrorFrame.make({ code: Code.NotLeader, leaderHint: "10.0.0.2:5555" })));
  const { rds } = drain(c);
  assert.deepEqual(rds.flatMap((r) => r.redirects).map((r) => [r.requestId, r.leaderHint]), [[id, "10.0.0.2:5555"]]);
  assert.ok(rds.flatMap((r) => r.completions)[0]!.error instanceof NotLeaderError);
});

test("the broker's GoAway refuses new requests", () => {
  const c = handshaken();
  c.receive(encodeFrame(0, w.GoAway.make({ code: Code.Unavailable, message: "shutting down" })));
  const { rds } = drain(c);
  assert.equal(rds.find((r) => r.state)?.state?.goingAway, true);
  assert.throws(() => c.send(w.Ping.make()));
});

test("the same bytes in any split give the same Readys", () => {
  const seed = Number(process.env.SEED ?? Date.now() % 100000);
  let x = seed;
  const rand = (n: number) => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return x % n;
  };
  const server = [
    encodeFrame(1, w.HandshakeOk.make({ version: 1, nodeId: "n", maxFrameSize: 16 << 20, serverName: "s" })),
    encodeFrame(2, w.SubscribeOk.make({ prefetch: 4 })),
    encodeFrame(2, w.Delivery.make({ messages: [1n, 2n].map((lease) => w.DeliveredMessage.make({ queue: "q", lease, payload: new Uint8Array(5000) })) }), 4096),
    encodeFrame(7, w.Ping.make({ nonce: 5n })),
    encodeFrame(2, w.LeaseExpired.make({ leases: [{ id: new Uint8Array(16), lease: 1n }] })),
  ];
  const stream = new Uint8Array(server.reduce((n, b) => n + b.length, 0));
  let off = 0;
  for (const b of server) {
    stream.set(b, off);
    off += b.length;
  }
  const run = (split: boolean) => {
    const c = new Conn();
    c.tick(0);
    c.subscribe("q", 4);
    const log: string[] = [];
    const take = () => {
      while (c.hasReady()) {
        const rd = c.ready();
        log.push(Buffer.from(rd.out).toString("hex"));
        log.push(JSON.stringify([rd.completions.length, rd.deliveries.map((d) => d.messages.length), rd.expired.length]));
        c.advance(rd);
      }
    };
    take();
    for (let i = 0; i < stream.length; ) {
      const n = split ? 1 + rand(700) : stream.length;
      c.receive(stream.subarray(i, i + n));
      i += n;
    }
    take();
    return log.join("|");
  };
  assert.equal(run(true), run(false), `SEED=${seed}`);
});
