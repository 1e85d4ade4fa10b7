"""moto's S3 server on 127.0.0.1 behind a small WSGI fault injector (``moto[server]``).

The injector sits between the socket and moto's app, so the client under test (s3fs /
aiobotocore) sees real HTTP: an S3 error document with a status (``status``: 500
InternalError, 503 SlowDown), a body cut short with ``Connection: close`` (``short``), a delay
(``slow``), or an action run before the request (``swap``: e.g. overwrite the object, so its
ETag changes and ``IfMatch`` answers 412).

Example::

    with S3Server() as s3:                               # AWS_ENDPOINT_URL_S3=s3.endpoint
        s3.faults.append(S3Fault("status", "model-00002", status=503))
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from werkzeug.serving import make_server

from .loopback import Loopback


@dataclass
class S3Fault:
    kind: str
    match: str = ""
    times: int = 1
    status: int = 500
    after: int = 0
    delay: float = 0.0
    skip: int = 0
    action: Callable[[], None] | None = None


_CODES = {500: "InternalError", 503: "SlowDown", 429: "SlowDown"}


class S3Server(Loopback):
    """moto's S3 in a daemon thread; ``faults`` apply to GETs whose path contains ``match``."""

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )

        self.faults: list[S3Fault] = []
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self._moto = DomainDispatcherApplication(create_backend_app)
        self.server = make_server(
            "127.0.0.1", 0, self._app, threaded=True, request_handler=MotoRequestHandler
        )
        self.serve(self.server)

    def _take(self, method: str, path: str) -> S3Fault | None:
        if method != "GET":
            return None
        with self._lock:
            for f in self.faults:
                if f.times > 0 and f.match and f.match in path:
                    if f.skip > 0:
                        f.skip -= 1
                        return None
                    f.times -= 1
                    return f
        return None

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        fault = self._take(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""))
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.delay)
        if fault is not None and fault.kind == "swap" and fault.action is not None:
            fault.action()
        if fault is not None and fault.kind == "status":
            code = _CODES.get(fault.status, "InternalError")
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>injected</Message></Error>"
            ).encode()
            start_response(
                f"{fault.status} Injected",
                [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
            )
            return [body]
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = status, headers
            return lambda data: None

        chunks = b"".join(self._moto(environ, capture))
        headers = list(captured["headers"])
        if fault is not None and fault.kind == "short":
            chunks = chunks[: fault.after]
            headers = [(k, v) for k, v in headers if k.lower() != "connection"]
            headers.append(("Connection", "close"))
        with self._lock:
            self.bytes_sent += len(chunks)
        start_response(captured["status"], headers)
        return [chunks]
