"""Starts a fila-server for the live tests: on a free port of 127.0.0.1,
its data in a temporary directory. The binary is $FILA_TEST_SERVER_BIN, else
the repository's bin/fila-server (make build)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

LISTENING = re.compile(r'msg="fila-server listening" addr=(\S+)|"msg":"fila-server listening","addr":"([^"]+)"')


def server_bin() -> str | None:
    """The fila-server binary, or None when there is none."""
    b = os.environ.get("FILA_TEST_SERVER_BIN") or str(Path(__file__).resolve().parents[3] / "bin" / "fila-server")
    return b if os.access(b, os.X_OK) else None


class Broker:
    """A running fila-server; addr is its host:port. stop() ends it."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        bin = server_bin()
        if bin is None:
            raise FileNotFoundError("no fila-server: run make build or set FILA_TEST_SERVER_BIN")
        self.dir = tempfile.mkdtemp(prefix="fila-python-")
        # fila-server reads FILA_* variables as its configuration: pass none
        # of this process's.
        e = {k: v for k, v in os.environ.items() if not k.startswith("FILA_")}
        e.update(FILA_SERVER_LISTEN_ADDR="127.0.0.1:0", FILA_STORAGE_DATA_DIR=self.dir,
                 FILA_SERVER_NODE_ID="python", FILA_LOG_LEVEL="info", **(env or {}))
        self.proc = subprocess.Popen([bin], cwd=self.dir, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        addr: list[str] = []
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                m = LISTENING.search(line)
                if m and not addr:
                    addr.append(m.group(1) or m.group(2))
                    ready.set()
            ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not ready.wait(60) or not addr:
            self.stop()
            raise RuntimeError("fila-server did not listen:\n" + "".join(self.log[-20:]))
        self.addr = addr[0]

    def stop(self) -> None:
        """Stop the server and remove its data."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)
