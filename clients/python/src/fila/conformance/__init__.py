"""The conformance drivers of the Python client (docs/conformance.md):

    python3 -m fila.conformance core              the core-mode JSON-lines driver
    python3 -m fila.conformance client NAME ADDR  run scenario NAME against ADDR
    python3 -m fila.conformance list              the scenarios implemented

A scenario this client does not implement exits with status 77 (skipped).
"""

from __future__ import annotations

SKIP = 77
"""The exit status of a scenario this client does not implement."""


def main(args: list[str]) -> int:
    """Run the driver args name; returns the exit status."""
    if args[:1] == ["core"]:
        from .core_driver import main as core_main
        return core_main()
    if args[:1] == ["client"] and len(args) == 3:
        from .scenarios import run
        return run(args[1], args[2])
    if args[:1] == ["list"]:
        from .scenarios import SCENARIOS
        for name in sorted(SCENARIOS):
            print(name)
        return 0
    print(__doc__)
    return 2
