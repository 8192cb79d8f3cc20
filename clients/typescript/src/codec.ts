/**
 * The primitive encodings of the Fila wire protocol, which the generated
 * codec (wire_gen.ts) calls field by field: a growable big-endian Writer,
 * a bounds-checked Reader, and the helpers of the JSON mapping.
 *
 * @module
 */

/** A JSON object, as the JSON mapping of frames produces and reads it. */
export type JSONObject = { [key: string]: unknown };

/** An empty byte array, shared as the zero value of bytes fields. */
export const EMPTY: Uint8Array = new Uint8Array(0);

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8");

/** The longest string the wire can carry, in bytes. */
export const MAX_STRING = 0xffff;

/**
 * A Writer appends big-endian primitives to a growable buffer. Encoders
 * never fail: a string longer than 65,535 bytes is cut to that length, as
 * the Go codec does; callers that take strings from users check them first.
 */
export class Writer {
  /** The buffer; bytes [0, length) are written. */
  buf: Uint8Array;
  /** Bytes written. */
  length = 0;
  private view: DataView;

  /** Makes a writer with room for size bytes before it grows. */
  constructor(size = 256) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
  }

  /** Makes sure n more bytes fit. */
  ensure(n: number): void {
    const need = this.length + n;
    if (need <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < need) size *= 2;
    const nb = new Uint8Array(size);
    nb.set(this.buf.subarray(0, this.length));
    this.buf = nb;
    this.view = new DataView(nb.buffer);
  }

  /** Returns the bytes written, as a view of the buffer. */
  bytes(): Uint8Array {
    return this.buf.subarray(0, this.length);
  }

  /** Forgets the bytes written, keeping the buffer. */
  reset(): void {
    this.length = 0;
  }

  u8(v: number): void {
    this.ensure(1);
    this.buf[this.length++] = v;
  }
  u16(v: number): void {
    this.ensure(2);
    this.view.setUint16(this.length, v);
    this.length += 2;
  }
  u32(v: number): void {
    this.ensure(4);
    this.view.setUint32(this.length, v);
    this.length += 4;
  }
  u64(v: bigint): void {
    this.ensure(8);
    this.view.setBigUint64(this.length, BigInt.asUintN(64, v));
    this.length += 8;
  }
  i64(v: bigint): void {
    this.ensure(8);
    this.view.setBigInt64(this.length, BigInt.asIntN(64, v));
    this.length += 8;
  }
  f64(v: number): void {
    this.ensure(8);
    this.view.setFloat64(this.length, v);
    this.length += 8;
  }
  bool(v: boolean): void {
    this.u8(v ? 1 : 0);
  }
  /** A u16 byte length, then the string's UTF-8 bytes. */
  str(s: string): void {
    const n = s.length;
    this.ensure(2 + n * 3);
    const at = this.length + 2;
    let i = 0;
    // ASCII fast path: most protocol strings are short and ASCII.
    for (; i < n; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) break;
      this.buf[at + i] = c;
    }
    let len = i;
    if (i < n) {
      len = i + encoder.encodeInto(s.slice(i), this.buf.subarray(at + i)).written;
    }
    if (len > MAX_STRING) len = MAX_STRING;
    this.view.setUint16(this.length, len);
    this.length = at + len;
  }
  /** A u32 byte length, then the bytes. */
  bytesField(b: Uint8Array): void {
    this.ensure(4 + b.length);
    this.view.setUint32(this.length, b.length);
    this.buf.set(b, this.length + 4);
    this.length += 4 + b.length;
  }
  /** 16 raw bytes. */
  uuid(id: Uint8Array): void {
    this.ensure(16);
    if (id.length === 16) this.buf.set(id, this.length);
    else this.buf.fill(0, this.length, this.length + 16);
    this.length += 16;
  }
  /** Reserves a struct's u32 length prefix and returns where it is. */
  beginStruct(): number {
    this.ensure(4);
    const at = this.length;
    this.length += 4;
    return at;
  }
  /** Fills in the length prefix reserved at at. */
  endStruct(at: number): void {
    this.view.setUint32(at, this.length - at - 4);
  }
  /** Writes raw bytes. */
  raw(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
  }
}

/**
 * A DecodeError describes a malformed frame body: which frame, which
 * field (such as "messages[3].payload"), at which byte offset of the body,
 * and what was wrong. listTooLong marks a list over its declared maximum,
 * which a broker refuses without closing the connection.
 */
export class DecodeError extends Error {
  /** The frame being decoded, such as "Enqueue". */
  frame: string;
  /** The field being decoded; may be empty. */
  field: string;
  /** Byte offset in the body where decoding failed. */
  offset: number;
  /** What was wrong: "truncated", "bool is neither 0 nor 1", ... */
  reason: string;
  /** True for a list over its declared maximum. */
  listTooLong: boolean;

  /** Makes the error. */
  constructor(frame: string, field: string, offset: number, reason: string, listTooLong = false) {
    super("");
    this.name = "DecodeError";
    this.frame = frame;
    this.field = field;
    this.offset = offset;
    this.reason = reason;
    this.listTooLong = listTooLong;
    this.message = this.text();
  }

  /** The error's text, in the Go codec's words. */
  text(): string {
    if (this.field !== "") {
      return `wire: decode ${this.frame}: field ${this.field} at offset ${this.offset}: ${this.reason}`;
    }
    return `wire: decode ${this.frame} at offset ${this.offset}: ${this.reason}`;
  }
}

/**
 * nested prefixes the field of a DecodeError thrown while decoding a
 * struct with the field that holds it (messages[3]); other errors pass
 * unchanged.
 */
export function nested(e: unknown, field: string): unknown {
  if (e instanceof DecodeError) {
    e.field = e.field === "" ? field : field + "." + e.field;
    e.message = e.text();
  }
  return e;
}

/**
 * A Reader decodes primitives from bytes [off, end) of buf. Every read
 * checks the bytes left first and throws a DecodeError, so a forged length
 * never causes an allocation larger than the body. Offsets in errors are
 * relative to the frame body (sub-readers share its buffer).
 */
export class Reader {
  /** The next byte to read. */
  off: number;
  private readonly view: DataView;

  /** Makes a reader over buf[off, end) of the frame named frame. */
  constructor(
    readonly buf: Uint8Array,
    readonly frame: string,
    off = 0,
    readonly end = buf.length,
  ) {
    this.off = off;
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  /** Reports whether bytes are left: an optional field is decoded only then. */
  more(): boolean {
    return this.off < this.end;
  }

  /** Throws a DecodeError at the current offset. */
  fail(field: string, reason: string, listTooLong = false): never {
    throw new DecodeError(this.frame, field, this.off, reason, listTooLong);
  }

  private need(n: number, field: string): void {
    if (n < 0 || this.end - this.off < n) this.fail(field, "truncated");
  }

  u8(field: string): number {
    this.need(1, field);
    return this.buf[this.off++]!;
  }
  u16(field: string): number {
    this.need(2, field);
    const v = this.view.getUint16(this.off);
    this.off += 2;
    return v;
  }
  u32(field: string): number {
    this.need(4, field);
    const v = this.view.getUint32(this.off);
    this.off += 4;
    return v;
  }
  u64(field: string): bigint {
    this.need(8, field);
    const v = this.view.getBigUint64(this.off);
    this.off += 8;
    return v;
  }
  i64(field: string): bigint {
    this.need(8, field);
    const v = this.view.getBigInt64(this.off);
    this.off += 8;
    return v;
  }
  f64(field: string): number {
    this.need(8, field);
    const v = this.view.getFloat64(this.off);
    this.off += 8;
    return v;
  }
  bool(field: string): boolean {
    this.need(1, field);
    const v = this.buf[this.off];
    if (v === 0 || v === 1) {
      this.off++;
      return v === 1;
    }
    return this.fail(field, "bool is neither 0 nor 1");
  }
  /** A u16 length and that many bytes of UTF-8. */
  str(field: string): string {
    const n = this.u16(field);
    this.need(n, field);
    const start = this.off;
    this.off += n;
    if (n < 48) {
      let s = "";
      for (let i = start; i < start + n; i++) {
        const c = this.buf[i]!;
        if (c >= 0x80) return decoder.decode(this.buf.subarray(start, start + n));
        s += String.fromCharCode(c);
      }
      return s;
    }
    return decoder.decode(this.buf.subarray(start, start + n));
  }
  /** A u32 length and that many bytes, as a view of the body (not a copy). */
  bytes(field: string): Uint8Array {
    const n = this.u32(field);
    this.need(n, field);
    const b = this.buf.subarray(this.off, this.off + n);
    this.off += n;
    return b;
  }
  /** 16 raw bytes, copied. */
  uuid(field: string): Uint8Array {
    this.need(16, field);
    const b = this.buf.slice(this.off, this.off + 16);
    this.off += 16;
    return b;
  }
  /**
   * A list's u32 count, checked against the bytes left (items of at least
   * minItem bytes each) and the list's maximum (0: none).
   */
  count(field: string, minItem: number, max: number): number {
    const n = this.u32(field);
    if (n * minItem > this.end - this.off) this.fail(field, "list count exceeds the bytes left");
    if (max > 0 && n > max) this.fail(field, `list of ${n} items exceeds the maximum of ${max}`, true);
    return n;
  }
  /**
   * A nested struct's u32 length: returns a reader over exactly its bytes
   * and moves past them. Bytes it leaves unread are fields of a later
   * version, skipped.
   */
  sub(field: string): Reader {
    const n = this.u32(field);
    this.need(n, field);
    const r = new Reader(this.buf, this.frame, this.off, this.off + n);
    this.off += n;
    return r;
  }
}

/** Reports whether every byte of b is zero. */
export function isZero(b: Uint8Array): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] !== 0) return false;
  return true;
}

const HEX = "0123456789abcdef";

/** Lower-case hex of b. */
export function toHex(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i++) s += HEX[b[i]! >> 4]! + HEX[b[i]! & 15]!;
  return s;
}

/** The bytes of a hex string; throws for odd length or a non-hex digit. */
export function fromHex(s: string): Uint8Array {
  if (s.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(s)) throw new TypeError("fila: bad hex: " + s);
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** The canonical 8-4-4-4-12 form of a 16-byte UUID. */
export function uuidString(id: Uint8Array): string {
  const h = toHex(id);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

/** The 16 bytes of a UUID in canonical form (dashes optional); throws for anything else. */
export function parseUUID(s: string): Uint8Array {
  const h = s.replace(/-/g, "");
  if (h.length !== 32) throw new TypeError("fila: bad UUID: " + s);
  return fromHex(h);
}

/** The value of an enum from its JSON form: its spec name (any case) or its number. */
export function enumFromJSON(names: Readonly<Record<number, string>>, v: unknown): number {
  if (typeof v === "number") return v;
  const s = String(v).toUpperCase();
  for (const [k, n] of Object.entries(names)) if (n === s) return Number(k);
  throw new TypeError("fila: unknown enum value " + String(v));
}
