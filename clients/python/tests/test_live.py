"""A live round trip against a real fila-server: admin, producing with
concurrent sends batched into one Enqueue, consuming with prefetch, and
every way of settling a delivery. Skipped when there is no fila-server
binary (make build)."""

import asyncio
import unittest

import fila
from fila import Message

from .broker import Broker, server_bin


@unittest.skipIf(server_bin() is None, "no fila-server binary (make build, or set FILA_TEST_SERVER_BIN)")
class LiveTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.broker = Broker({"FILA_QUEUE_VISIBILITY_TIMEOUT": "30s"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.broker.stop()

    async def test_round_trip(self) -> None:
        async with await fila.Client.connect(self.broker.addr, client_name="fila-python-test") as c:
            self.assertTrue(c.server_name.startswith("fila-server"))
            await c.admin.create_queue("py.live", backoff=(0.01, 0.01))
            with self.assertRaises(fila.QueueExistsError):
                await c.admin.create_queue("py.live")
            names = [q.name for q in await c.admin.list_queues()]
            self.assertIn("py.live", names)

            # 20 concurrent sends travel together.
            ids = await asyncio.gather(*(c.producer.send(Message("py.live", f"m{i}".encode(), fairness_key=f"k{i % 3}",
                                                                headers={"n": str(i)})) for i in range(20)))
            self.assertEqual(len(set(ids)), 20)
            stats = await c.admin.queue_stats("py.live")
            self.assertEqual(stats.ready, 20)
            with self.assertRaises(fila.QueueNotFoundError):
                await c.producer.enqueue("py.nowhere", b"x")

            sub = await c.consumer.subscribe("py.live", prefetch=8)
            self.assertEqual(sub.prefetch, 8)
            seen: dict[bytes, int] = {}
            settled = 0
            released = False
            async for d in sub:
                seen[d.id] = seen.get(d.id, 0) + 1
                self.assertEqual(d.headers["n"], d.payload[1:].decode())
                n = int(d.headers["n"])
                if d.attempt == 1 and n == 0:
                    await d.nack("try again")
                elif d.attempt == 1 and n == 1:
                    await d.retry_after(0.01)
                elif n == 2 and not released:
                    released = True  # delivered again with the same attempt
                    await d.release()
                elif d.attempt == 1 and n == 3:
                    deadline = await d.extend_lease(60)
                    self.assertGreater(deadline, d.enqueued_at_ms)
                    await d.ack()
                    settled += 1
                else:
                    await d.ack()
                    settled += 1
                if settled == 20:
                    break
            self.assertEqual(set(seen), set(ids))
            self.assertEqual(seen[ids[0]], 2)
            await sub.close()
            with self.assertRaises(fila.MessageNotFoundError):
                await d.ack()
            self.assertEqual((await c.admin.queue_stats("py.live")).ready, 0)
            await c.admin.delete_queue("py.live")
            self.assertGreaterEqual(await c.ping(), 0)

    async def test_unauthorized_is_typed(self) -> None:
        b = Broker({"FILA_AUTH_ENABLED": "true", "FILA_AUTH_BOOTSTRAP_APIKEY": "python-bootstrap-key"})
        try:
            with self.assertRaises(fila.UnauthorizedError):
                await fila.Client.connect(b.addr, api_key="wrong")
            c = await fila.Client.connect(b.addr, api_key="python-bootstrap-key")
            await c.admin.create_queue("py.auth")
            await c.close()
        finally:
            b.stop()


if __name__ == "__main__":
    unittest.main()
