/**
 * The conformance driver of the TypeScript client, for the Go harness
 * (`fila-conformance core -exec` and `client -exec`; docs/conformance.md).
 *
 *     node dist/conformance.js core               JSON lines on stdin/stdout
 *     node dist/conformance.js client NAME ADDR   run scenario NAME against ADDR
 *
 * Core mode drives the sans-io core (core.ts) one command a line and
 * answers each with one line: the bytes the core wrote since the last
 * answer (hex), the events it reported, and the command's error if it
 * failed. Client mode runs the client (client.ts) through one scenario,
 * the port of the Go scenario of the same name (conformance/scenario);
 * exit status 0 when it went as the scenario expects, 1 when not, 77 for
 * a scenario not ported.
 *
 * @module
 */

import * as readline from "node:readline";

import { toHex, fromHex, uuidString, Writer } from "./codec.js";
import type { JSONObject } from "./codec.js";
import { Conn, ConnectionLostError, HandshakeError } from "./core.js";
import type { Ready } from "./core.js";
import { FilaError, codeName } from "./errors_gen.js";
import { scenarioNames, scenarios } from "./scenarios.js";
import { ConnError } from "./frames.js";
import { CODECS_BY_NAME, Handshake, OPCODE_NAMES, Subscribe } from "./wire_gen.js";

// ---------------------------------------------------------------------------
// core mode

/** The JSON form of an error in an event. */
function errJSON(e: Error): JSONObject {
  if (e instanceof ConnectionLostError) return { text: e.message };
  if (e instanceof HandshakeError) return errJSON(e.cause);
  if (e instanceof FilaError) {
    const o: JSONObject = { code: codeName(e.code), message: e.detail };
    if (e.leaderHint !== "") o.leader_hint = e.leaderHint;
    return o;
  }
  if (e instanceof ConnError) return { code: codeName(e.code), reason: e.reason };
  return { text: e.message };
}

function events(rd: Ready): JSONObject[] {
  const out: JSONObject[] = [];
  for (const cp of rd.completions) {
    const ev: JSONObject = { kind: "completion", req: cp.requestId, op: OPCODE_NAMES[cp.op] };
    if (cp.error) ev.error = errJSON(cp.error);
    else ev.response = OPCODE_NAMES[cp.response!.op];
    out.push(ev);
  }
  for (const d of rd.deliveries) {
    out.push({
      kind: "delivery",
      subscription: d.subscription,
      messages: d.messages.map((m) => ({ id: uuidString(m.id), lease: m.lease.toString() })),
    });
  }
  for (const e of rd.expired) {
    out.push({
      kind: "expired",
      subscription: e.subscription,
      leases: e.leases.map((l) => ({ id: uuidString(l.id), lease: l.lease.toString() })),
    });
  }
  for (const e of rd.ended) {
    const ev: JSONObject = { kind: "ended", subscription: e.subscription };
    if (e.error) ev.error = errJSON(e.error);
    out.push(ev);
  }
  for (const r of rd.redirects) {
    out.push({ kind: "redirect", req: r.requestId, op: OPCODE_NAMES[r.op], leader_hint: r.leaderHint });
  }
  return out;
}

/** Renders the state changes of a Ready, as the Go runner's stateEvents does. */
function stateEvents(prev: Ready["state"], st: NonNullable<Ready["state"]>): JSONObject[] {
  const out: JSONObject[] = [];
  if (st.handshaken && !prev?.handshaken) {
    out.push({
      kind: "state",
      state: "handshaken",
      version: st.version,
      node_id: st.nodeId,
      server_name: st.serverName,
      max_frame_size: st.serverMaxFrame,
      capabilities: st.capabilities,
    });
  }
  if (st.goingAway && !prev?.goingAway) {
    const ev: JSONObject = { kind: "state", state: "going-away" };
    if (st.goAwayCode !== 0 || st.goAwayMessage !== "") {
      ev.code = codeName(st.goAwayCode);
      ev.message = st.goAwayMessage;
    }
    if (st.leaderHint !== "") ev.leader_hint = st.leaderHint;
    out.push(ev);
  }
  if (st.failed && !prev?.failed) {
    out.push({ kind: "state", state: "failed", error: errJSON(st.err!) });
  }
  return out;
}

async function runCore(): Promise<void> {
  let c: Conn | undefined;
  let prev: Ready["state"];
  const out = new Writer(1024);
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const reply = (o: JSONObject) => process.stdout.write(JSON.stringify(o) + "\n");
  for await (const line of rl) {
    if (line.trim() === "") continue;
    let error: string | undefined;
    const evs: JSONObject[] = [];
    try {
      const cmd = JSON.parse(line) as JSONObject;
      switch (cmd.cmd) {
        case "start": {
          const h = Handshake.fromJSON((cmd.handshake ?? {}) as JSONObject);
          c = new Conn({
            clientName: h.clientName,
            apiKey: h.apiKey,
            capabilities: h.capabilities,
            maxFrameSize: h.maxFrameSize,
          });
          c.tick(0);
          break;
        }
        case "receive":
          need(c).receive(fromHex(String(cmd.hex ?? "")));
          break;
        case "send": {
          const codec = CODECS_BY_NAME[String(cmd.frame)];
          if (!codec) throw new Error(`unknown frame ${String(cmd.frame)}`);
          need(c).send(codec.fromJSON((cmd.fields ?? {}) as JSONObject));
          break;
        }
        case "subscribe": {
          need(c).subscribeFrame(Subscribe.fromJSON(cmd));
          break;
        }
        case "unsubscribe":
          need(c).unsubscribe(Number(cmd.subscription));
          break;
        case "settle":
          need(c).settle(
            Number(cmd.subscription),
            ((cmd.leases ?? []) as unknown[]).map((l) => BigInt(l as string)),
          );
          break;
        case "close":
          need(c).close();
          break;
        case "tick":
          need(c).tick(Number(cmd.ms));
          break;
        default:
          throw new Error(`unknown command ${String(cmd.cmd)}`);
      }
    } catch (e) {
      error = e instanceof Error ? e.message : String(e);
    }
    if (c) {
      while (c.hasReady()) {
        const rd = c.ready();
        out.raw(rd.out);
        evs.push(...events(rd));
        if (rd.state) {
          evs.push(...stateEvents(prev, rd.state));
          prev = rd.state;
        }
        c.advance(rd);
      }
    }
    const r: JSONObject = { out: toHex(out.bytes()), events: evs };
    out.reset();
    if (error !== undefined) r.error = error;
    reply(r);
  }
}

function need(c: Conn | undefined): Conn {
  if (!c) throw new Error("no core: start first");
  return c;
}

async function runClient(name: string, addr: string): Promise<number> {
  const sc = scenarios[name];
  if (!sc) {
    process.stderr.write(`conformance: scenario ${name} is not implemented\n`);
    return 77;
  }
  try {
    await sc(addr);
    return 0;
  } catch (e) {
    process.stderr.write(`conformance: ${name}: ${e instanceof Error ? e.message : String(e)}\n`);
    return 1;
  }
}

async function main(argv: string[]): Promise<number> {
  switch (argv[0]) {
    case "core":
      await runCore();
      return 0;
    case "client":
      if (argv.length !== 3) break;
      return runClient(argv[1]!, argv[2]!);
    case "list":
      process.stdout.write(scenarioNames().join("\n") + "\n");
      return 0;
  }
  process.stderr.write("usage: conformance.js core | client NAME ADDR | list\n");
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e) => {
    process.stderr.write(String(e) + "\n");
    process.exitCode = 1;
  },
);


