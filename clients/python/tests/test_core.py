"""The sans-io core, driven by hand: handshake, correlation, credit
(returned in quarters of the prefetch, before the settling request; not for
an expired lease), keepalive, GoAway, redirects and connection failures.
The conformance transcripts check the same core byte for byte (make
test-python runs them); these tests state its rules one at a time."""

import unittest

from fila import QueueNotFoundError, wire
from fila.core import Config, Conn, ConnectionLost, KeepaliveTimeout, Ready


def frames(out: bytes) -> list[tuple[int, wire.Frame]]:
    """The frames in out, as (request ID, frame)."""
    r = wire.FrameReader(1 << 24)
    r.feed(out)
    got = []
    while (nf := r.next()) is not None:
        f = wire.decode_body(nf[0].opcode, nf[1])
        assert f is not None
        got.append((nf[0].request_id, f))
    return got


def server(req: int, f: wire.Frame) -> bytes:
    return bytes(wire.encode_frame(req, f, 1 << 24))


def take(c: Conn) -> Ready:
    rd = c.ready()
    c.advance(rd)
    return rd


def handshaken(prefetch_cap: int = 0) -> Conn:
    c = Conn(Config(client_name="test"))
    c.tick(0)
    (req, hs), = frames(take(c).out)
    assert isinstance(hs, wire.Handshake) and req == 1
    c.receive(server(1, wire.HandshakeOk(version=1, node_id="n", server_name="s", max_frame_size=1 << 24)))
    rd = take(c)
    assert rd.state is not None and rd.state.handshaken
    return c


def deliver(c: Conn, sub: int, *leases: int) -> None:
    msgs = [wire.DeliveredMessage(id=bytes([i]) * 16, queue="q", lease=lease) for i, lease in enumerate(leases, 1)]
    c.receive(server(sub, wire.Delivery(messages=msgs)))


class CoreTest(unittest.TestCase):
    def test_requests_wait_for_the_handshake(self) -> None:
        c = Conn()
        c.tick(0)
        take(c)
        req = c.send(wire.ListQueues())
        self.assertEqual(req, 2)
        self.assertEqual(take(c).out, b"")
        c.receive(server(1, wire.HandshakeOk(version=1)))
        self.assertEqual([f.NAME for _, f in frames(take(c).out)], ["ListQueues"])

    def test_error_completes_with_typed_error(self) -> None:
        c = handshaken()
        req = c.send(wire.DeleteQueue(name="nope"))
        take(c)
        c.receive(server(req, wire.ErrorFrame(code=wire.Code.QUEUE_NOT_FOUND, message="queue not found: nope")))
        cp, = take(c).completions
        self.assertEqual(cp.request_id, req)
        self.assertIsInstance(cp.error, QueueNotFoundError)

    def test_redirect_is_an_event(self) -> None:
        c = handshaken()
        req = c.send(wire.ListQueues())
        take(c)
        c.receive(server(req, wire.ErrorFrame(code=wire.Code.NOT_LEADER, leader_hint="10.0.0.2:5555")))
        rd = take(c)
        self.assertEqual([(r.request_id, r.leader_hint) for r in rd.redirects], [(req, "10.0.0.2:5555")])
        self.assertEqual(len(rd.completions), 1)

    def test_credit_returns_in_quarters_before_the_settling_request(self) -> None:
        c = handshaken()
        sub = c.subscribe("q", 8)
        take(c)
        c.receive(server(sub, wire.SubscribeOk(prefetch=8)))
        deliver(c, sub, 1, 2, 3)
        take(c)
        c.settle(sub, 1)
        self.assertEqual(take(c).out, b"")  # 1 < 8/4: held back
        c.settle(sub, 2)
        c.send(wire.Ack(items=[wire.LeaseRef(queue="q", id=b"\x02" * 16, lease=2)]))
        got = frames(take(c).out)
        self.assertEqual([f.NAME for _, f in got], ["Credit", "Ack"])
        credit = got[0][1]
        assert isinstance(credit, wire.Credit)
        self.assertEqual((got[0][0], credit.subscription, credit.credits), (0, sub, 2))
        self.assertEqual(c.credit(sub), (7, 1))

    def test_no_credit_for_an_expired_lease(self) -> None:
        c = handshaken()
        sub = c.subscribe("q", 1)
        take(c)
        c.receive(server(sub, wire.SubscribeOk(prefetch=1)))
        deliver(c, sub, 5)
        c.receive(server(sub, wire.LeaseExpired(leases=[wire.ExpiredLease(id=b"\x01" * 16, lease=5)])))
        rd = take(c)
        self.assertEqual(len(rd.expired), 1)
        self.assertEqual(c.credit(sub), (1, 0))  # the broker gave it back
        c.settle(sub, 5)
        self.assertEqual(take(c).out, b"")

    def test_delivery_beyond_credit_fails_the_connection(self) -> None:
        c = handshaken()
        sub = c.subscribe("q", 1)
        take(c)
        c.receive(server(sub, wire.SubscribeOk(prefetch=1)))
        with self.assertRaises(wire.ConnError):
            deliver(c, sub, 1, 2)
        rd = take(c)
        assert rd.state is not None
        self.assertTrue(rd.state.failed)
        end, = rd.ended
        self.assertIsInstance(end.error, ConnectionLost)

    def test_server_ping_is_answered(self) -> None:
        c = handshaken()
        c.receive(server(9, wire.Ping(nonce=42)))
        (req, pong), = frames(take(c).out)
        self.assertEqual((req, pong), (9, wire.Pong(nonce=42)))

    def test_keepalive_on_the_core_clock(self) -> None:
        c = handshaken()
        c.tick(29.9)
        self.assertFalse(c.has_ready())
        c.tick(30)
        (_, ping), = frames(take(c).out)
        self.assertIsInstance(ping, wire.Ping)
        c.tick(40)
        rd = take(c)
        assert rd.state is not None
        self.assertIsInstance(rd.state.error, KeepaliveTimeout)

    def test_goaway(self) -> None:
        c = handshaken()
        c.receive(server(0, wire.GoAway(code=wire.Code.UNAVAILABLE, message="bye", leader_hint="b:5555")))
        rd = take(c)
        assert rd.state is not None
        self.assertTrue(rd.state.going_away)
        self.assertEqual(rd.state.leader_hint, "b:5555")
        with self.assertRaises(Exception):
            c.send(wire.ListQueues())

    def test_batches_split_at_the_broker_cap(self) -> None:
        c = Conn()
        c.tick(0)
        take(c)
        c.receive(server(1, wire.HandshakeOk(version=1, max_batch_size=2)))
        take(c)
        items = [wire.LeaseRef(queue="q", lease=i) for i in range(3)]
        req = c.send(wire.Ack(items=items))
        parts = frames(take(c).out)
        self.assertEqual([len(f.items) for _, f in parts], [2, 1])  # type: ignore[union-attr]
        c.receive(server(parts[1][0], wire.AckResult(results=[wire.ItemResult()])))
        c.receive(server(parts[0][0], wire.AckResult(results=[wire.ItemResult(), wire.ItemResult(code=23)])))
        cp, = take(c).completions
        self.assertEqual(cp.request_id, req)
        assert isinstance(cp.response, wire.AckResult)
        self.assertEqual([r.code for r in cp.response.results], [0, 23, 0])


if __name__ == "__main__":
    unittest.main()
