"""An HTTP server on 127.0.0.1 for tests of the download clients (Python's ``http.server``,
one thread per connection) whose every GET is answered by a function the test gives, with a
record of what it was asked and how many requests it held at once."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Hostile:
    """What the server does with each GET, and what it saw."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], None]) -> None:
        self.answer = answer
        self.lock = threading.Condition()
        self.open = 0  # requests being answered now
        self.most_open = 0
        self.paths: list[str] = []
        self.stop = threading.Event()


@contextlib.contextmanager
def hostile_server(
    answer: Callable[[BaseHTTPRequestHandler, Hostile], None],
) -> Iterator[tuple[str, Hostile]]:
    state = Hostile(lambda handler: answer(handler, state))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            with state.lock:
                state.open += 1
                state.most_open = max(state.most_open, state.open)
                state.paths.append(self.path)
                state.lock.notify_all()
            try:
                state.answer(self)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up: what it should do
            finally:
                with state.lock:
                    state.open -= 1

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        state.stop.set()
        with state.lock:
            state.lock.notify_all()
        server.shutdown()
        server.server_close()


def held(
    count: int,
    then: Callable[[BaseHTTPRequestHandler], None] = lambda h: h.send_error(404),
    timeout: float = 150,
) -> Callable[[BaseHTTPRequestHandler, Hostile], None]:
    """Every request held until ``count`` are open at once (or ``timeout`` seconds, only so that
    a failing test ends), then answered by ``then`` (404)."""

    def answer(handler: BaseHTTPRequestHandler, state: Hostile) -> None:
        with state.lock:
            state.lock.wait_for(lambda: state.most_open >= count or state.stop.is_set(), timeout)
        then(handler)

    return answer


def files_from(store: Path) -> Callable[[BaseHTTPRequestHandler], None]:
    """An answer serving the files under ``store`` by their path (404 for any other path)."""

    def serve(handler: BaseHTTPRequestHandler) -> None:
        path = store / handler.path.lstrip("/")
        if ".." in handler.path or not path.is_file():
            handler.send_error(404)
            return
        body = path.read_bytes()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return serve
