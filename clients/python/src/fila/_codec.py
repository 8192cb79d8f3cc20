"""The hand-written half of the codec: the primitives the generated
_wire_gen module decodes and encodes with, DecodeError, and the framing
(headers, continuation frames, size checks) in FrameReader and
encode_frame.

A frame on the wire::

    +-----------+-----------+----------+---------------+------------------+
    | length 4B | opcode 2B | flags 2B | request_id 4B | body (length B)  |
    +-----------+-----------+----------+---------------+------------------+

length counts the body's bytes, at most the receiver's max frame size. A
longer body travels as consecutive frames with the same opcode and request
ID, all but the last flagged Continued (0x0001), whose bodies the receiver
joins, up to 256 MiB.
"""

from __future__ import annotations

import struct

U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")
F64 = struct.Struct(">d")
HEADER = struct.Struct(">IHHI")

ZERO_UUID = bytes(16)
"""The zero UUID: no ID (16 zero bytes)."""


class DecodeError(Exception):
    """A malformed frame body: which frame, which field (such as
    messages[3].payload), at which byte offset of the body, and what was
    wrong. too_long marks a list over its declared maximum, which a
    receiver may refuse alone, keeping the connection."""

    def __init__(self, field: str, offset: int, reason: str, *, frame: str = "", too_long: bool = False) -> None:
        super().__init__(reason)
        self.frame = frame
        self.field = field
        self.offset = offset
        self.reason = reason
        self.too_long = too_long

    def within(self, prefix: str) -> DecodeError:
        """This error as seen from the struct that holds the field: the
        field path gains prefix (a list item, messages[3])."""
        self.field = f"{prefix}.{self.field}" if self.field else prefix
        return self

    def __str__(self) -> str:
        if self.field:
            return f"wire: decode {self.frame}: field {self.field} at offset {self.offset}: {self.reason}"
        return f"wire: decode {self.frame} at offset {self.offset}: {self.reason}"


def need(b: bytes, o: int, end: int, n: int, field: str) -> None:
    """Raise DecodeError unless n bytes are left before end."""
    if n < 0 or end - o < n:
        raise DecodeError(field, o, "truncated")


def str_of(b: bytes, o: int, end: int, field: str) -> tuple[str, int]:
    """Decode a string (u16 length, UTF-8) at o; returns it and the next offset.
    Bytes that are not UTF-8 survive a round trip (surrogateescape)."""
    if end - o < 2:
        raise DecodeError(field, o, "truncated")
    n = (b[o] << 8) | b[o + 1]
    o += 2
    if end - o < n:
        raise DecodeError(field, o, "truncated")
    return b[o:o + n].decode("utf-8", "surrogateescape"), o + n


def f64_nonzero(v: float) -> bool:
    """Whether v's encoding is not all zero bytes (-0.0 is not zero)."""
    return F64.pack(v) != b"\x00" * 8
