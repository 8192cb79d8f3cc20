"""The Fila wire protocol: the generated frames and codes (_wire_gen) and
the framing around them: encode_frame, which splits a long body into
continuation frames, and FrameReader, which cuts a byte stream into frames
in any split, joins continuations and enforces the size limits.

A frame on the wire::

    +-----------+-----------+----------+---------------+------------------+
    | length 4B | opcode 2B | flags 2B | request_id 4B | body (length B)  |
    +-----------+-----------+----------+---------------+------------------+
"""

from __future__ import annotations

from dataclasses import dataclass

from ._codec import HEADER
from ._codec import ZERO_UUID as ZERO_UUID
from ._codec import DecodeError as DecodeError
from ._wire_gen import *  # noqa: F401,F403  (the generated protocol is this module's API)
from ._wire_gen import (
    FLAG_CONTINUED,
    HEADER_SIZE,
    MAX_REASSEMBLED_SIZE,
    Code,
    Frame,
    code_name,
    frame_name,
)


class ConnError(Exception):
    """A connection-scoped failure: the peer violated the protocol (code,
    such as MALFORMED_FRAME or FRAME_TOO_LARGE, and reason) and the
    connection must be closed."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        return f"wire: connection error {code_name(self.code)}: {self.reason}"


@dataclass(slots=True)
class Header:
    """A frame's 12-byte header. length counts body bytes."""

    length: int
    opcode: int
    flags: int
    request_id: int


def encode_frame(request_id: int, frame: Frame, max_frame: int, out: bytearray | None = None) -> bytearray:
    """Append frame to out (a new bytearray if None) as one frame, or, when
    its body is longer than max_frame bytes, as continuation frames of at
    most max_frame bytes each. Returns out."""
    if out is None:
        out = bytearray()
    start = len(out)
    out += b"\x00" * HEADER_SIZE
    frame._enc(out)
    n = len(out) - start - HEADER_SIZE
    if n <= max_frame:
        HEADER.pack_into(out, start, n, frame.OPCODE, 0, request_id)
        return out
    body = bytes(out[start + HEADER_SIZE:])
    del out[start:]
    off = 0
    while off < len(body):
        chunk = body[off:off + max_frame]
        off += len(chunk)
        flags = FLAG_CONTINUED if off < len(body) else 0
        out += HEADER.pack(len(chunk), frame.OPCODE, flags, request_id)
        out += chunk
    return out


class FrameReader:
    """Cuts bytes fed in any split into whole frames. A run of continuation
    frames comes out as one frame with the joined body.

    next() raises ConnError for a frame over max_frame (FRAME_TOO_LARGE), a
    continuation longer than max_reassembled (FRAME_TOO_LARGE), or another
    frame between continuations (PROTOCOL_VIOLATION); the reader is then
    unusable."""

    def __init__(self, max_frame: int, max_reassembled: int = 0) -> None:
        self.max_frame = max_frame
        self.max_reassembled = max_reassembled or MAX_REASSEMBLED_SIZE
        self._buf = bytearray()
        self._start = 0
        self._cont: Header | None = None
        self._parts: list[bytes] = []
        self._cont_len = 0
        self._err: ConnError | None = None

    def feed(self, data: bytes) -> None:
        """Add bytes read from the connection."""
        if self._start and self._start == len(self._buf):
            self._buf.clear()
            self._start = 0
        elif self._start > 65536 and self._start * 2 > len(self._buf):
            del self._buf[:self._start]
            self._start = 0
        self._buf += data

    def buffered(self) -> int:
        """Bytes held that do not yet make a whole frame."""
        return len(self._buf) - self._start + self._cont_len

    def next(self) -> tuple[Header, bytes] | None:
        """The next whole frame, or None when more bytes are needed."""
        if self._err is not None:
            raise self._err
        while True:
            avail = len(self._buf) - self._start
            if avail < HEADER_SIZE:
                return None
            length, opcode, flags, req = HEADER.unpack_from(self._buf, self._start)
            if length > self.max_frame:
                return self._fail(Code.FRAME_TOO_LARGE, f"frame of {length} bytes exceeds the max frame size {self.max_frame}")
            total = HEADER_SIZE + length
            if avail < total:
                return None
            body = bytes(self._buf[self._start + HEADER_SIZE:self._start + total])
            self._start += total
            h = Header(length, opcode, flags, req)
            cont = self._cont
            if cont is not None:
                if opcode != cont.opcode or req != cont.request_id:
                    return self._fail(Code.PROTOCOL_VIOLATION,
                                      f"frame {frame_name(opcode)} for request {req} interleaved with the continuation of "
                                      f"{frame_name(cont.opcode)} for request {cont.request_id}")
                if self._cont_len + len(body) > self.max_reassembled:
                    return self._fail(Code.FRAME_TOO_LARGE, f"continued frame exceeds {self.max_reassembled} bytes")
                self._parts.append(body)
                self._cont_len += len(body)
                if flags & FLAG_CONTINUED:
                    continue
                joined = b"".join(self._parts)
                self._cont, self._parts, self._cont_len = None, [], 0
                return Header(len(joined), cont.opcode, 0, cont.request_id), joined
            if flags & FLAG_CONTINUED:
                self._cont = Header(0, opcode, flags & ~FLAG_CONTINUED, req)
                self._parts = [body]
                self._cont_len = len(body)
                continue
            return h, body

    def _fail(self, code: int, reason: str) -> tuple[Header, bytes] | None:
        self._err = ConnError(code, reason)
        self._buf = bytearray()
        self._start = 0
        self._parts, self._cont_len = [], 0
        raise self._err
