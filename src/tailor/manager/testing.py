"""A real uvicorn server on 127.0.0.1 in a background thread, bounded in time, stopped by handle, with the
settings of ``tailor manager`` (tailor.manager.httpserver.uvicorn_settings: connection cap, header and body deadlines).

Used by the tests, the benchmark and (later) the demo harness:

    with LiveServer(create_app(cfg)) as url:
        httpx.get(url + "/healthz")
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from tailor.manager.httpserver import uvicorn_settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, app, port: int | None = None, start_timeout_s: float = 20.0):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        mgr = app.state.manager  # an app of tailor.manager.api.create_app: its bounds and counters
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, lifespan="on", timeout_graceful_shutdown=5,
                                **uvicorn_settings(mgr.cfg, mgr.metrics))  # the real server's settings too
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)
        self.start_timeout_s = start_timeout_s

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn did not start on {self.url}")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def __exit__(self, *exc) -> None:
        self.stop()
