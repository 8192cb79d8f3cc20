import { test } from "node:test";
import assert from "node:assert/strict";

import { Reader, Writer, DecodeError, fromHex, toHex, uuidString, parseUUID } from "../codec.js";
import { Code, OPERATION_CODES, codeName, errorOf, QueueNotFoundError, FilaError, operationMayReturn } from "../errors_gen.js";
import * as w from "../wire_gen.js";
import { encodeFrame, parseHeader } from "../frames.js";

const hex = (s: string) => fromHex(s.replace(/\s+/g, ""));

function decode(op: w.Opcode, body: Uint8Array): w.Frame {
  return w.CODECS[op]!.decode(new Reader(body, w.OPCODE_NAMES[op]!));
}

test("Handshake encodes to the transcript's bytes", () => {
  const f = w.Handshake.make({ maxVersion: 1, minVersion: 1, clientName: "client1", maxFrameSize: 16777216 });
  assert.equal(toHex(encodeFrame(1, f)), toHex(hex("00000017 0001 0000 00000001 0001 0001 00000000 0000 0007 636c69656e7431 01000000")));
});

test("optional scalar fields are sent up to the last one that is not zero", () => {
  const base = { version: 1, nodeId: "node1", maxFrameSize: 16777216, serverName: "server1" };
  const without = encodeFrame(1, w.HandshakeOk.make(base));
  const withCap = encodeFrame(1, w.HandshakeOk.make({ ...base, maxBatchSize: 4096 }));
  assert.equal(withCap.length, without.length + 4);
  assert.equal(toHex(withCap.subarray(without.length)), "00001000");
  // An older peer's body, without the field, decodes it as zero.
  const old = decode(w.Opcode.HandshakeOk, without.subarray(12)) as w.HandshakeOk;
  assert.equal(old.maxBatchSize, 0);
});

test("every frame round-trips through its codec and its JSON form", () => {
  for (const [name, codec] of Object.entries(w.CODECS_BY_NAME)) {
    const f = codec.make();
    const b = encodeFrame(7, f);
    const h = parseHeader(b);
    assert.equal(h.opcode, codec.opcode, name);
    assert.equal(h.length, b.length - 12, name);
    assert.deepEqual(decode(h.opcode, b.subarray(12)), f, name);
    assert.deepEqual(codec.fromJSON(JSON.parse(JSON.stringify(codec.toJSON(f)))), f, name);
  }
});

test("a filled Enqueue round-trips, with u64 as bigint and the JSON mapping's forms", () => {
  const f = w.Enqueue.make({
    messages: [
      w.EnqueueMessage.make({
        queue: "orders",
        headers: [{ key: "tenant", value: "acmé" }],
        payload: new Uint8Array([1, 2, 3]),
        fairnessKey: "acme",
        weight: 3,
        throttleKeys: ["stripe"],
        delayMs: 2n ** 63n + 5n,
      }),
    ],
    producerId: parseUUID("01941f29-7c00-7e8c-8e8c-e378ec4c6562"),
    sequence: 1n,
  });
  const b = encodeFrame(3, f);
  assert.deepEqual(decode(w.Opcode.Enqueue, b.subarray(12)), f);
  const j = w.Enqueue.toJSON(f) as { messages: { payload: string; delay_ms: string }[]; producer_id: string };
  assert.equal(j.messages[0]!.payload, "010203");
  assert.equal(j.messages[0]!.delay_ms, (2n ** 63n + 5n).toString());
  assert.equal(j.producer_id, "01941f29-7c00-7e8c-8e8c-e378ec4c6562");
  assert.deepEqual(w.Enqueue.fromJSON(JSON.parse(JSON.stringify(j))), f);
});

test("codes and enums map to their spec names in JSON", () => {
  const e = w.ErrorFrame.make({ code: Code.QueueNotFound, message: "m" });
  assert.equal(w.ErrorFrame.toJSON(e).code, "QUEUE_NOT_FOUND");
  assert.deepEqual(w.ErrorFrame.fromJSON({ code: "QUEUE_NOT_FOUND", message: "m" }), e);
  const p = w.Permission.make({ kind: w.PermissionKind.Consume, pattern: "a.*" });
  assert.equal(w.Permission.toJSON(p).kind, "CONSUME");
  assert.deepEqual(w.Permission.fromJSON({ kind: "consume", pattern: "a.*" }), p);
});

test("a struct's unknown trailing bytes are skipped", () => {
  // One ItemResult whose struct carries two extra bytes from a newer peer.
  const body = hex("00000001 00000006 0014 0000 abcd");
  const r = decode(w.Opcode.AckResult, body) as w.AckResult;
  assert.equal(r.results.length, 1);
  assert.equal(r.results[0]!.code, Code.QueueNotFound);
});

test("malformed bodies throw DecodeError naming the field and offset", () => {
  const cases: [w.Opcode, string, string][] = [
    [w.Opcode.Pong, "", "wire: decode Pong: field nonce at offset 0: truncated"],
    [w.Opcode.AckResult, "000f4240 00000000", "wire: decode AckResult: field results at offset 4: list count exceeds the bytes left"],
    [w.Opcode.EnqueueResult, "00000001 00000015 0000 0000 01941f297c007b7eab7e28192bb82783 07",
      "wire: decode EnqueueResult: field results[0].duplicate at offset 28: bool is neither 0 nor 1"],
  ];
  for (const [op, body, want] of cases) {
    assert.throws(() => decode(op, hex(body)), (e: unknown) => e instanceof DecodeError && e.message === want);
  }
});

test("a list over its declared maximum is refused from its count", () => {
  const wr = new Writer();
  wr.u16(1); // version
  wr.u32(65); // capabilities: at most 64
  for (let i = 0; i < 65; i++) wr.str("x");
  assert.throws(
    () => decode(w.Opcode.HandshakeOk, wr.bytes()),
    (e: unknown) => e instanceof DecodeError && e.listTooLong,
  );
});

test("strings are UTF-8, up to 65,535 bytes", () => {
  const wr = new Writer(4);
  wr.str("héllo ✓");
  const r = new Reader(wr.bytes(), "t");
  assert.equal(r.str("s"), "héllo ✓");
  const big = new Writer();
  big.str("x".repeat(70000));
  assert.equal(big.length, 2 + 65535);
});

test("UUIDs print in canonical form", () => {
  const s = "01941f29-7c00-7b7e-ab7e-28192bb82783";
  assert.equal(uuidString(parseUUID(s)), s);
});

test("each code has its error class, and operations their code sets", () => {
  const e = errorOf(Code.QueueNotFound, "queue not found: orders", "", "Enqueue");
  assert.ok(e instanceof QueueNotFoundError);
  assert.ok(e instanceof FilaError);
  assert.equal(e.codeName, "QUEUE_NOT_FOUND");
  assert.equal(e.message, "fila: enqueue: queue not found: queue not found: orders");
  assert.equal(codeName(999), "CODE_999");
  assert.ok(errorOf(999 as Code) instanceof FilaError);
  assert.ok(operationMayReturn("Enqueue", Code.MessageTooLarge));
  assert.ok(operationMayReturn("Enqueue", Code.Unavailable));
  assert.ok(!operationMayReturn("Enqueue", Code.LeaseExpired));
});

test("every (operation, code) pair maps to the code's own error class", () => {
  for (const [op, codes] of Object.entries(OPERATION_CODES)) {
    for (const code of codes) {
      const e = errorOf(code, "detail", "", op);
      assert.equal(e.code, code, `${op} ${codeName(code)}`);
      assert.notEqual(e.constructor, FilaError, `${op} ${codeName(code)} has no class of its own`);
      assert.ok(operationMayReturn(op, code));
    }
  }
});
