"""Fila's Python client: asyncio, standard library only.

    import asyncio, fila

    async def main() -> None:
        async with await fila.Client.connect("127.0.0.1:5555") as c:
            await c.admin.create_queue("orders")
            await c.producer.send(fila.Message("orders", b"hello", fairness_key="acme"))
            sub = await c.consumer.subscribe("orders", prefetch=16)
            async for d in sub:
                await d.ack()
                break

    asyncio.run(main())

Errors are exceptions: every failure the broker reports is a FilaError
whose class names its code (QueueNotFoundError, LeaseExpiredError, ...);
failures of the connection are CoreErrors (ConnectionLost, ...).
"""

from . import wire
from ._errors_gen import *  # noqa: F401,F403  (one exception class per code)
from ._errors_gen import ERRORS, OPERATION_ERRORS, STATUS_ERRORS, FilaError, error_for
from .client import Admin, ClosedError, Client, Consumer, Delivery, Message, Producer, SendResult, Subscription, __version__
from .core import ConnectionLost, CoreError, GoingAway, HandshakeError, KeepaliveTimeout, Redirect, TLSRequired, VersionError

__all__ = [
    "Admin", "Client", "ClosedError", "ConnectionLost", "Consumer", "CoreError", "Delivery", "ERRORS", "FilaError",
    "GoingAway", "HandshakeError", "KeepaliveTimeout", "Message", "OPERATION_ERRORS", "Producer", "Redirect",
    "STATUS_ERRORS", "SendResult", "Subscription", "TLSRequired", "VersionError", "__version__", "error_for", "wire",
]
