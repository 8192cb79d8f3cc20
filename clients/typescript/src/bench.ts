/**
 * Throughput of the TypeScript client against a running broker:
 *
 *     node dist/bench.js --addr 127.0.0.1:5555 --mode produce --count 100000 --size 1024
 *     node dist/bench.js --addr 127.0.0.1:5555 --mode consume --count 100000
 *
 * produce: one producer keeps 256 sends outstanding (concurrent sends are
 * batched into Enqueues) until count messages of size bytes are durable.
 * consume: the queue is filled first (not timed), then one consumer with
 * prefetch 1024 receives and acks each of count messages. Prints one JSON
 * line: {"client":"typescript","mode":"produce","msgs_per_s":N}.
 *
 * @module
 */

import { performance } from "node:perf_hooks";

import { Client, Message } from "./client.js";
import { QueueExistsError } from "./errors_gen.js";

interface Args {
  addr: string;
  mode: string;
  count: number;
  size: number;
  queue: string;
  outstanding: number;
  prefetch: number;
}

function parse(argv: string[]): Args {
  const a: Args = {
    addr: "127.0.0.1:5555",
    mode: "produce",
    count: 100_000,
    size: 1024,
    queue: "",
    outstanding: 256,
    prefetch: 1024,
  };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i]!.replace(/^--?/, "");
    const v = argv[++i];
    if (v === undefined) throw new Error(`bench: --${k} needs a value`);
    switch (k) {
      case "addr":
      case "mode":
      case "queue":
        a[k] = v;
        break;
      case "count":
      case "size":
      case "outstanding":
      case "prefetch":
        a[k] = Number(v);
        break;
      default:
        throw new Error(`bench: unknown flag --${k}`);
    }
  }
  if (a.queue === "") a.queue = `bench.ts.${a.mode}.${process.pid}`;
  return a;
}

/** Sends count messages with outstanding sends in flight at most. */
async function produce(c: Client, a: Args): Promise<void> {
  const payload = new Uint8Array(a.size).fill(0x61);
  let sent = 0;
  const worker = async () => {
    while (sent < a.count) {
      sent++;
      await c.producer.send(new Message(a.queue, payload));
    }
  };
  await Promise.all(Array.from({ length: Math.min(a.outstanding, a.count) }, worker));
}

async function main(): Promise<void> {
  const a = parse(process.argv.slice(2));
  const c = await Client.connect({ addr: a.addr, clientName: "fila-ts-bench" });
  try {
    await c.admin.createQueue({ name: a.queue }).catch((e) => {
      if (!(e instanceof QueueExistsError)) throw e;
    });
    let secs: number;
    if (a.mode === "produce") {
      const t0 = performance.now();
      await produce(c, a);
      secs = (performance.now() - t0) / 1000;
    } else if (a.mode === "consume") {
      await produce(c, a);
      const t0 = performance.now();
      const sub = await c.consumer.subscribe(a.queue, { prefetch: a.prefetch });
      let n = 0;
      const acks: Promise<void>[] = [];
      for await (const d of sub) {
        acks.push(d.ack());
        if (++n === a.count) break;
      }
      await Promise.all(acks);
      secs = (performance.now() - t0) / 1000;
      await sub.close();
    } else {
      throw new Error(`bench: --mode ${a.mode}: want produce or consume`);
    }
    await c.admin.deleteQueue(a.queue);
    process.stdout.write(
      JSON.stringify({ client: "typescript", mode: a.mode, msgs_per_s: Math.round(a.count / secs) }) + "\n",
    );
  } finally {
    await c.close();
  }
}

main().catch((e) => {
  process.stderr.write(String(e instanceof Error ? e.message : e) + "\n");
  process.exitCode = 1;
});
