/**
 * Fila's TypeScript client: a producer, a consumer and an administrator
 * over Fila's binary protocol, on Node's net and tls, with no runtime
 * dependencies. See README.md for a quickstart.
 *
 * - client.ts: Client.connect, Producer, Consumer, Subscription,
 *   Delivery, Administrator, Message.
 * - core.ts: the sans-io core (Conn) the client drives.
 * - wire_gen.ts, errors_gen.ts: the codec and the typed errors, generated
 *   from the protocol's spec.
 *
 * @module
 */

export * from "./client.js";
export * from "./errors_gen.js";
export {
  Conn,
  ConnectionLostError,
  GoingAwayError,
  HandshakeError,
  KeepaliveTimeoutError,
  TLSRequiredError,
  VersionError,
} from "./core.js";
export type {
  Completion,
  ConnState,
  CoreConfig,
  DeliveryBatch,
  Expiry,
  Ready,
  Redirect,
  SubscriptionEnd,
} from "./core.js";
export { ConnError, FrameReader, encodeFrame, parseHeader, writeFrame } from "./frames.js";
export type { Header, RawFrame } from "./frames.js";
export { DecodeError, Reader, Writer, parseUUID, uuidString, toHex, fromHex } from "./codec.js";
export * as wire from "./wire_gen.js";
