import { test } from "node:test";
import assert from "node:assert/strict";

import { Code } from "../errors_gen.js";
import { ConnError, FrameReader, encodeFrame, parseHeader } from "../frames.js";
import * as w from "../wire_gen.js";

const big = () =>
  w.Enqueue.make({ messages: [w.EnqueueMessage.make({ queue: "q", payload: new Uint8Array(6000).fill(7) })] });

test("a body over the peer's max frame size is split into continuation frames", () => {
  const b = encodeFrame(3, big(), 4096);
  const h1 = parseHeader(b);
  assert.equal(h1.length, 4096);
  assert.equal(h1.flags & w.FLAG_CONTINUED, w.FLAG_CONTINUED);
  const h2 = parseHeader(b, 12 + 4096);
  assert.equal(h2.flags & w.FLAG_CONTINUED, 0);
  assert.equal(h2.requestId, 3);
  assert.equal(b.length, 12 + 4096 + 12 + h2.length);
});

test("frames fed one byte at a time come out whole, continuations joined", () => {
  const one = encodeFrame(3, big(), 4096);
  const two = encodeFrame(4, w.Ping.make({ nonce: 9n }));
  const all = new Uint8Array([...one, ...two]);
  const fr = new FrameReader();
  const got = [];
  for (const byte of all) {
    fr.feed(new Uint8Array([byte]));
    for (let f = fr.next(); f; f = fr.next()) got.push(f);
  }
  assert.equal(got.length, 2);
  assert.equal(got[0]!.header.requestId, 3);
  assert.equal(got[0]!.header.flags, 0);
  assert.deepEqual(got[0]!.body, encodeFrame(3, big()).subarray(12));
  assert.equal(got[1]!.header.opcode, w.Opcode.Ping);
  assert.equal(fr.buffered(), 0);
});

test("a header announcing more than the max frame size fails before its body", () => {
  const fr = new FrameReader(4096);
  fr.feed(new Uint8Array([0, 0, 0x10, 0x01, 0, 4, 0, 0, 0, 0, 0, 1]));
  assert.throws(() => fr.next(), (e: unknown) => e instanceof ConnError && e.code === Code.FrameTooLarge);
  assert.throws(() => fr.next(), ConnError);
});

test("another frame inside a continuation is a protocol violation", () => {
  const b = encodeFrame(3, big(), 4096);
  const fr = new FrameReader();
  fr.feed(b.subarray(0, 12 + 4096));
  fr.feed(encodeFrame(5, w.Ping.make()));
  assert.throws(() => fr.next(), (e: unknown) => e instanceof ConnError && e.code === Code.ProtocolViolation);
});
