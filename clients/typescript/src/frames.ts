/**
 * Framing: the 12-byte header, writing a frame (split into continuation
 * frames when its body exceeds the peer's max frame size), and an
 * incremental FrameReader that cuts a byte stream into frames, enforcing
 * the size limits before buffering and reassembling continuations.
 *
 * A header is
 *
 *     +-----------+-----------+----------+--------------+
 *     | length 4B | opcode 2B | flags 2B | requestId 4B |
 *     +-----------+-----------+----------+--------------+
 *
 * big-endian; length counts the body bytes after the header.
 *
 * @module
 */

import { Writer } from "./codec.js";
import { Code, codeName } from "./errors_gen.js";
import {
  CODECS,
  DEFAULT_MAX_FRAME_SIZE,
  FLAG_CONTINUED,
  HEADER_SIZE,
  MAX_REASSEMBLED_SIZE,
  opcodeName,
} from "./wire_gen.js";
import type { Frame } from "./wire_gen.js";

/** A frame header. */
export interface Header {
  /** Body bytes after the header. */
  length: number;
  /** The frame's opcode. */
  opcode: number;
  /** Bit flags (FLAG_CONTINUED). */
  flags: number;
  /** The request ID; 0 for a connection-scoped frame. */
  requestId: number;
}

/**
 * A ConnError is a connection-scoped failure: the peer broke the protocol
 * (or the limits) and the connection must be closed.
 */
export class ConnError extends Error {
  /** The code that says why: MALFORMED_FRAME, FRAME_TOO_LARGE, PROTOCOL_VIOLATION, ... */
  readonly code: Code;
  /** The detail. */
  readonly reason: string;

  /** Makes the error. */
  constructor(code: Code, reason: string) {
    super(`wire: connection error ${codeName(code)}: ${reason}`);
    this.name = "ConnError";
    this.code = code;
    this.reason = reason;
  }
}

/**
 * Appends the frame f with requestId to w: one frame, or, when its body
 * exceeds maxFrame bytes, a run of frames of at most maxFrame body bytes,
 * all but the last flagged Continued.
 */
export function writeFrame(w: Writer, requestId: number, f: Frame, maxFrame = DEFAULT_MAX_FRAME_SIZE): void {
  const start = w.length;
  w.ensure(HEADER_SIZE);
  w.length += HEADER_SIZE;
  const codec = CODECS[f.op]!;
  codec.encode(w, f);
  const bodyLen = w.length - start - HEADER_SIZE;
  if (bodyLen <= maxFrame) {
    putHeader(w.buf, start, bodyLen, f.op, 0, requestId);
    return;
  }
  const body = w.buf.slice(start + HEADER_SIZE, w.length);
  w.length = start;
  for (let off = 0; off < body.length; ) {
    const n = Math.min(body.length - off, maxFrame);
    const flags = off + n < body.length ? FLAG_CONTINUED : 0;
    w.ensure(HEADER_SIZE + n);
    putHeader(w.buf, w.length, n, f.op, flags, requestId);
    w.buf.set(body.subarray(off, off + n), w.length + HEADER_SIZE);
    w.length += HEADER_SIZE + n;
    off += n;
  }
}

/** Encodes f as one frame, or continuation frames past maxFrame. */
export function encodeFrame(requestId: number, f: Frame, maxFrame = DEFAULT_MAX_FRAME_SIZE): Uint8Array {
  const w = new Writer(64);
  writeFrame(w, requestId, f, maxFrame);
  return w.bytes();
}

function putHeader(b: Uint8Array, at: number, length: number, opcode: number, flags: number, requestId: number): void {
  const v = new DataView(b.buffer, b.byteOffset + at, HEADER_SIZE);
  v.setUint32(0, length);
  v.setUint16(4, opcode);
  v.setUint16(6, flags);
  v.setUint32(8, requestId);
}

/** Decodes a header from the first 12 bytes of b, at off. */
export function parseHeader(b: Uint8Array, off = 0): Header {
  const v = new DataView(b.buffer, b.byteOffset + off, HEADER_SIZE);
  return { length: v.getUint32(0), opcode: v.getUint16(4), flags: v.getUint16(6), requestId: v.getUint32(8) };
}

/** A complete (reassembled) frame from a FrameReader. */
export interface RawFrame {
  /** The header; length is the reassembled body's, flags without Continued. */
  header: Header;
  /** The body, a private copy. */
  body: Uint8Array;
}

/**
 * A FrameReader splits a byte stream into frames. Bytes go in with feed in
 * pieces of any size; complete frames come out of next. A header whose
 * length exceeds maxFrame fails at once with FRAME_TOO_LARGE, before its
 * body is buffered; continuation frames are joined up to maxReassembled
 * bytes, and another frame interleaved with them is a PROTOCOL_VIOLATION.
 * After a failure, next throws it again.
 */
export class FrameReader {
  private buf: Uint8Array = new Uint8Array(0);
  private start = 0;
  private end = 0;
  private cont: Uint8Array[] = [];
  private contLen = 0;
  private contHdr: Header | null = null;
  private err: ConnError | null = null;

  /** Makes a reader accepting bodies of at most maxFrame bytes. */
  constructor(
    public maxFrame = DEFAULT_MAX_FRAME_SIZE,
    public maxReassembled = MAX_REASSEMBLED_SIZE,
  ) {}

  /** Appends bytes (copied). */
  feed(p: Uint8Array): void {
    if (this.err) return;
    if (this.start === this.end) {
      this.start = this.end = 0;
    }
    if (this.end + p.length > this.buf.length) {
      const live = this.end - this.start;
      if (live + p.length <= this.buf.length && this.start > 0) {
        this.buf.copyWithin(0, this.start, this.end);
      } else {
        const nb = new Uint8Array(Math.max(this.buf.length * 2, live + p.length, 4096));
        nb.set(this.buf.subarray(this.start, this.end));
        this.buf = nb;
      }
      this.start = 0;
      this.end = live;
    }
    this.buf.set(p, this.end);
    this.end += p.length;
  }

  /** Bytes fed and not yet returned as frames. */
  buffered(): number {
    return this.end - this.start + this.contLen;
  }

  private fail(e: ConnError): never {
    this.err = e;
    this.buf = new Uint8Array(0);
    this.start = this.end = 0;
    this.cont = [];
    this.contLen = 0;
    throw e;
  }

  /**
   * Returns the next complete frame, or null when more bytes are needed.
   * Throws a ConnError for a frame over the limits or an interleaved
   * continuation.
   */
  next(): RawFrame | null {
    if (this.err) throw this.err;
    for (;;) {
      const avail = this.end - this.start;
      if (avail < HEADER_SIZE) return null;
      const h = parseHeader(this.buf, this.start);
      if (h.length > this.maxFrame) {
        this.fail(
          new ConnError(Code.FrameTooLarge, `frame of ${h.length} bytes exceeds the max frame size ${this.maxFrame}`),
        );
      }
      const total = HEADER_SIZE + h.length;
      if (avail < total) return null;
      const body = this.buf.slice(this.start + HEADER_SIZE, this.start + total);
      this.start += total;
      if (this.contHdr) {
        const ch = this.contHdr;
        if (h.opcode !== ch.opcode || h.requestId !== ch.requestId) {
          this.fail(
            new ConnError(
              Code.ProtocolViolation,
              `frame ${opcodeName(h.opcode)} for request ${h.requestId} interleaved with the continuation of ${opcodeName(ch.opcode)} for request ${ch.requestId}`,
            ),
          );
        }
        if (this.contLen + body.length > this.maxReassembled) {
          this.fail(new ConnError(Code.FrameTooLarge, `continued frame exceeds ${this.maxReassembled} bytes`));
        }
        this.cont.push(body);
        this.contLen += body.length;
        if (h.flags & FLAG_CONTINUED) continue;
        const joined = new Uint8Array(this.contLen);
        let off = 0;
        for (const c of this.cont) {
          joined.set(c, off);
          off += c.length;
        }
        this.cont = [];
        this.contLen = 0;
        this.contHdr = null;
        return { header: { ...ch, length: joined.length }, body: joined };
      }
      if (h.flags & FLAG_CONTINUED) {
        this.contHdr = { ...h, flags: h.flags & ~FLAG_CONTINUED };
        this.cont = [body];
        this.contLen = body.length;
        continue;
      }
      return { header: h, body };
    }
  }
}
