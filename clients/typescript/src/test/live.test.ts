// A round trip against a real fila-server: $FILA_TEST_SERVER_BIN, started
// on a free port with a temporary data directory. Skipped without it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

import { Client, Message } from "../client.js";
import { MessageNotFoundError, QueueExistsError, QueueNotFoundError } from "../errors_gen.js";

const bin = process.env.FILA_TEST_SERVER_BIN;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** Starts fila-server and resolves once it accepts connections. */
async function startServer(extra: Record<string, string> = {}): Promise<{ addr: string; proc: ChildProcess; dir: string; log: () => string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fila-ts-"));
  const port = await freePort();
  const addr = `127.0.0.1:${port}`;
  const proc = spawn(bin!, [], {
    cwd: dir,
    env: {
      ...process.env,
      FILA_SERVER_LISTEN_ADDR: addr,
      FILA_STORAGE_DATA_DIR: dir,
      FILA_HTTP_LISTEN_ADDR: `127.0.0.1:${await freePort()}`,
      ...extra,
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  proc.stderr!.on("data", (b: Buffer) => (log += b.toString()));
  const deadline = Date.now() + 30_000;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, "127.0.0.1", () => {
        s.destroy();
        resolve(true);
      });
      s.on("error", () => resolve(false));
    });
    if (ok) break;
    if (Date.now() > deadline || proc.exitCode !== null) throw new Error("fila-server did not start:\n" + log);
    await new Promise((r) => setTimeout(r, 50));
  }
  return { addr, proc, dir, log: () => log };
}

test("a live round trip: admin, produce, consume, settle", { skip: !bin && "FILA_TEST_SERVER_BIN is not set" }, async () => {
  const srv = await startServer();
  try {
    const c = await Client.connect({ addr: srv.addr });
    await c.admin.createQueue({ name: "ts.live", visibilityTimeoutMs: 30_000n });
    await assert.rejects(c.admin.createQueue({ name: "ts.live" }), QueueExistsError);
    const names = (await c.admin.listQueues()).map((q) => q.name);
    assert.deepEqual(names, ["ts.live", "ts.live.dlq"]);

    // Concurrent sends share Enqueues; each resolves with its own ID.
    const ids = await Promise.all(
      Array.from({ length: 50 }, (_, i) => c.producer.send(new Message("ts.live", `m${i}`).header("n", String(i)).fairnessKey("k"))),
    );
    assert.equal(new Set(ids).size, 50);
    await assert.rejects(c.producer.enqueue("ts.missing", "x"), QueueNotFoundError);

    const sub = await c.consumer.subscribe("ts.live", { prefetch: 8 });
    assert.equal(sub.prefetch, 8);
    const got: string[] = [];
    for await (const d of sub) {
      got.push(d.id);
      if (got.length === 1) {
        await d.extendLease(60_000);
        await d.release(); // comes back later, same attempt
        continue;
      }
      await d.ack();
      if (got.length === 51) break;
    }
    assert.deepEqual(new Set(got), new Set(ids));
    const stats = await c.admin.queueStats("ts.live");
    assert.equal(stats.ready + stats.leased + stats.delayed, 0n);

    const last = await c.producer.enqueue("ts.live", "again");
    const d = (await sub.next())!;
    assert.equal(d.id, last);
    await d.ack();
    await assert.rejects(d.ack(), MessageNotFoundError);
    await sub.close();
    await c.admin.deleteQueue("ts.live");
    await c.close();
  } finally {
    srv.proc.kill("SIGTERM");
    await new Promise((r) => srv.proc.once("exit", r));
    fs.rmSync(srv.dir, { recursive: true, force: true });
  }
});

