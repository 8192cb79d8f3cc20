"""The generated codec: every frame round-trips through bytes and JSON, and
the decoder's rules (truncation, list maxima, unknown trailing bytes,
optional fields, continuation frames) hold."""

import dataclasses
import unittest

from fila import wire


def sample(cls: type) -> object:
    """An instance of cls with every field set to something not zero."""
    kw = {}
    for f in dataclasses.fields(cls):
        t = f.type if isinstance(f.type, str) else f.type.__name__
        t = t.replace("builtins.", "")
        if t == "int":
            kw[f.name] = 7
        elif t == "float":
            kw[f.name] = 0.5
        elif t == "bool":
            kw[f.name] = True
        elif t == "str":
            kw[f.name] = "x" + f.name
        elif t == "bytes":
            kw[f.name] = bytes(range(16))
        elif t == "list[str]":
            kw[f.name] = ["a", "b"]
        elif t == "list[int]":
            kw[f.name] = [1, 2 ** 63]
        elif t.startswith("list["):
            kw[f.name] = [sample(getattr(wire, t[5:-1]))]
        else:
            kw[f.name] = sample(getattr(wire, t))
    return cls(**kw)


class CodecTest(unittest.TestCase):
    def test_every_frame_round_trips(self) -> None:
        for op, cls in wire.FRAMES.items():
            with self.subTest(frame=cls.NAME):
                for f in (cls(), sample(cls)):
                    body = f.encode()
                    self.assertEqual(wire.decode_body(op, body), f)
                    self.assertEqual(cls.from_json(f.to_json()), f)

    def test_unknown_opcode_is_none(self) -> None:
        self.assertIsNone(wire.decode_body(0x0F01, b"hi"))

    def test_truncated_names_field_and_offset(self) -> None:
        with self.assertRaises(wire.DecodeError) as cm:
            wire.Pong.decode(b"\x00\x01")
        self.assertEqual(str(cm.exception), "wire: decode Pong: field nonce at offset 0: truncated")

    def test_nested_error_names_item(self) -> None:
        body = bytearray(wire.Enqueue(messages=[wire.EnqueueMessage(queue="q", payload=b"hello")]).encode())
        body[8:10] = b"\xff\xff"  # the queue name's length runs past the struct
        with self.assertRaises(wire.DecodeError) as cm:
            wire.Enqueue.decode(bytes(body))
        self.assertEqual(str(cm.exception), "wire: decode Enqueue: field messages[0].queue at offset 10: truncated")

    def test_list_count_beyond_body(self) -> None:
        with self.assertRaises(wire.DecodeError) as cm:
            wire.Enqueue.decode(b"\x00\x0f\x42\x40\x00\x00\x00\x00")
        self.assertIn("list count exceeds the bytes left", str(cm.exception))

    def test_list_over_max(self) -> None:
        f = wire.Subscribe(queue="q", rate_limits=[wire.RateLimit(name="r", limit=1, period_ms=1)] * 17)
        with self.assertRaises(wire.DecodeError) as cm:
            wire.Subscribe.decode(f.encode())
        self.assertTrue(cm.exception.too_long)

    def test_unknown_trailing_struct_bytes_are_skipped(self) -> None:
        # An ItemResult from a newer peer with a field appended.
        out = bytearray()
        wire.ItemResult(code=wire.Code.LEASE_EXPIRED, message="m")._enc(out)
        out += b"\xff\xff"
        body = b"\x00\x00\x00\x01" + len(out).to_bytes(4, "big") + bytes(out)
        got = wire.AckResult.decode(body)
        self.assertEqual(got.results, [wire.ItemResult(code=wire.Code.LEASE_EXPIRED, message="m")])

    def test_optional_fields_sent_only_when_set(self) -> None:
        plain = wire.Enqueue(messages=[]).encode()
        self.assertEqual(plain, b"\x00\x00\x00\x00")
        stamped = wire.Enqueue(messages=[], producer_id=b"\x01" * 16, sequence=5).encode()
        self.assertEqual(len(stamped), 4 + 16 + 8)
        self.assertEqual(wire.Enqueue.decode(plain).sequence, 0)

    def test_bool_must_be_0_or_1(self) -> None:
        with self.assertRaises(wire.DecodeError):
            wire.DeleteConfigOk.decode(b"\x02")

    def test_json_forms(self) -> None:
        f = wire.ExpiredLease(id=bytes(range(16)), lease=2 ** 64 - 1)
        self.assertEqual(f.to_json(), {"id": "00010203-0405-0607-0809-0a0b0c0d0e0f", "lease": "18446744073709551615"})
        e = wire.ErrorFrame(code=wire.Code.QUEUE_NOT_FOUND)
        self.assertEqual(e.to_json()["code"], "QUEUE_NOT_FOUND")
        p = wire.Permission(kind=wire.PermissionKind.CONSUME, pattern="*")
        self.assertEqual(p.to_json()["kind"], "CONSUME")
        self.assertEqual(wire.Permission.from_json(p.to_json()), p)


class FramingTest(unittest.TestCase):
    def test_split_into_continuation_frames_and_joined(self) -> None:
        f = wire.Enqueue(messages=[wire.EnqueueMessage(queue="q", payload=b"x" * 10000)])
        out = wire.encode_frame(3, f, 4096)
        self.assertGreater(len(out), 12 + 10000)
        r = wire.FrameReader(16 << 20)
        for i in range(0, len(out), 7):  # any split
            r.feed(out[i:i + 7])
        got = []
        while (nf := r.next()) is not None:
            got.append(nf)
        self.assertEqual(len(got), 1)
        h, body = got[0]
        self.assertEqual((h.opcode, h.request_id, h.flags), (wire.Opcode.ENQUEUE, 3, 0))
        self.assertEqual(wire.Enqueue.decode(body), f)

    def test_oversized_frame(self) -> None:
        r = wire.FrameReader(4096)
        r.feed((4097).to_bytes(4, "big") + b"\x01\x01\x00\x00\x00\x00\x00\x01")
        with self.assertRaises(wire.ConnError) as cm:
            r.next()
        self.assertEqual(cm.exception.code, wire.Code.FRAME_TOO_LARGE)

    def test_interleaved_continuation(self) -> None:
        r = wire.FrameReader(4096)
        r.feed(b"\x00\x00\x00\x01\x01\x01\x00\x01\x00\x00\x00\x01" + b"x")
        r.feed(b"\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x02")
        with self.assertRaises(wire.ConnError) as cm:
            r.next()
        self.assertEqual(cm.exception.code, wire.Code.PROTOCOL_VIOLATION)


if __name__ == "__main__":
    unittest.main()
