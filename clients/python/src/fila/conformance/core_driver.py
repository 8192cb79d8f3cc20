"""The core-mode conformance driver: the Python core behind the JSON-lines
protocol of `fila-conformance core -exec` (docs/conformance.md).

Each line on stdin is a command; each is answered by one line on stdout::

    {"out": "<hex of the bytes the core wrote since the last reply>",
     "events": [...], "error": "<set if the command failed>"}
"""

from __future__ import annotations

import dataclasses
import json
import sys
import uuid
from typing import IO, Any

from .. import wire
from .._errors_gen import FilaError
from ..core import Config, Conn, ConnectionLost, HandshakeError, Ready, State


def error_json(err: BaseException) -> dict[str, Any]:
    """An error in the driver protocol's form: a broker's error (code,
    message, leader_hint), a connection error (code, reason), or text."""
    if isinstance(err, HandshakeError):
        err = err.error
    if isinstance(err, FilaError):
        d: dict[str, Any] = {"code": wire.code_name(err.code)}
        if err.message:
            d["message"] = err.message
        if err.leader_hint:
            d["leader_hint"] = err.leader_hint
        return d
    if isinstance(err, wire.ConnError):
        return {"code": wire.code_name(err.code), "reason": err.reason}
    if isinstance(err, ConnectionLost):
        return {"text": str(err)}
    return {"text": str(err)}


def _lease(id: bytes, lease: int) -> dict[str, str]:
    return {"id": str(uuid.UUID(bytes=id)), "lease": str(lease)}


class Driver:
    """One core, driven by commands."""

    def __init__(self) -> None:
        self.conn: Conn | None = None
        self.prev = State()

    def events(self, rd: Ready) -> list[dict[str, Any]]:
        """The events of a Ready, in the order the Go runner renders them."""
        evs: list[dict[str, Any]] = []
        for cp in rd.completions:
            ev: dict[str, Any] = {"kind": "completion", "req": cp.request_id, "op": wire.frame_name(cp.op)}
            if cp.error is not None:
                ev["error"] = error_json(cp.error)
            else:
                assert cp.response is not None
                ev["response"] = cp.response.NAME
            evs.append(ev)
        for d in rd.deliveries:
            evs.append({"kind": "delivery", "subscription": d.subscription,
                        "messages": [_lease(m.id, m.lease) for m in d.messages]})
        for e in rd.expired:
            evs.append({"kind": "expired", "subscription": e.subscription,
                        "leases": [_lease(x.id, x.lease) for x in e.leases]})
        for end in rd.ended:
            ev = {"kind": "ended", "subscription": end.subscription}
            if end.error is not None:
                ev["error"] = error_json(end.error)
            evs.append(ev)
        for r in rd.redirects:
            evs.append({"kind": "redirect", "req": r.request_id, "op": wire.frame_name(r.op), "leader_hint": r.leader_hint})
        st = rd.state
        if st is not None:
            prev, self.prev = self.prev, st
            if st.handshaken and not prev.handshaken:
                evs.append({"kind": "state", "state": "handshaken", "version": st.version, "node_id": st.node_id,
                            "server_name": st.server_name, "max_frame_size": st.server_max_frame,
                            "capabilities": list(st.capabilities)})
            if st.going_away and not prev.going_away:
                evs.append({"kind": "state", "state": "going-away", "code": wire.code_name(st.goaway_code),
                            "message": st.goaway_message, "leader_hint": st.leader_hint})
            if st.failed and not prev.failed:
                ev = {"kind": "state", "state": "failed"}
                if st.error is not None:
                    ev["error"] = error_json(st.error)
                evs.append(ev)
        return evs

    def run(self, cmd: dict[str, Any]) -> None:
        """Carry out one command; raises for a failed one."""
        name = cmd.get("cmd")
        if name == "start":
            hs = wire.Handshake.from_json(cmd.get("handshake", {}))
            self.conn = Conn(Config(client_name=hs.client_name, api_key=hs.api_key,
                                    capabilities=list(hs.capabilities), max_frame_size=hs.max_frame_size))
            return
        c = self.conn
        if c is None:
            raise RuntimeError("no core: start first")
        if name == "receive":
            c.receive(bytes.fromhex(cmd["hex"]))
        elif name == "tick":
            c.tick(int(cmd["ms"]) / 1000)
        elif name == "send":
            c.send(wire.frame_from_json(cmd["frame"], cmd.get("fields", {})))
        elif name == "subscribe":
            f = wire.Subscribe.from_json(cmd)
            extra = {k.name: getattr(f, k.name) for k in dataclasses.fields(f)
                     if k.name not in ("queue", "prefetch", "rate_limits")}
            c.subscribe(f.queue, f.prefetch, f.rate_limits, **extra)
        elif name == "unsubscribe":
            c.unsubscribe(int(cmd["subscription"]))
        elif name == "settle":
            c.settle(int(cmd["subscription"]), *(int(x) for x in cmd.get("leases", [])))
        elif name == "close":
            c.close()
        else:
            raise ValueError(f"unknown command {name!r}")

    def reply(self, err: BaseException | None) -> dict[str, Any]:
        """The reply: what the core wrote and reported since the last one."""
        out = bytearray()
        evs: list[dict[str, Any]] = []
        c = self.conn
        while c is not None and c.has_ready():
            rd = c.ready()
            out += rd.out
            evs += self.events(rd)
            c.advance(rd)
        rep: dict[str, Any] = {"out": out.hex(), "events": evs}
        if err is not None:
            rep["error"] = str(err) or type(err).__name__
        return rep


def serve(stdin: IO[str], stdout: IO[str]) -> int:
    """Answer commands from stdin until it ends."""
    d = Driver()
    for line in stdin:
        if not line.strip():
            continue
        err: BaseException | None = None
        try:
            d.run(json.loads(line))
        except Exception as e:  # every failure is the command's, reported in its reply
            err = e
        stdout.write(json.dumps(d.reply(err)) + "\n")
        stdout.flush()
    return 0


def main() -> int:
    """Entry point of `python3 -m fila.conformance core`."""
    return serve(sys.stdin, sys.stdout)
