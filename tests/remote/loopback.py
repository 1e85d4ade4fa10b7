"""One lifecycle for the loopback test servers (hub, S3): serve on 127.0.0.1 in a thread,
stop and join on exit.

Example::

    class HubServer(Loopback):
        def __init__(self):
            self.serve(_QuietServer(("127.0.0.1", 0), handler))   # sets .endpoint
    with HubServer() as hub: ...
"""

from __future__ import annotations

import threading
from typing import Any


class Loopback:
    """A server object with ``serve_forever`` / ``shutdown`` / ``server_close`` run in a thread."""

    def serve(self, server: Any) -> None:
        self._server = server
        self.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self):  # type: ignore[no-untyped-def]  # the subclass itself
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
