"""A real HTTP receiver on 127.0.0.1 for the notification tests, and the proxy variables
that must not send its requests elsewhere."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy",
                   "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


class Receiver:
    """An HTTP server on 127.0.0.1 that records every request and answers as told.

    `replies` is a list of (status, body) or (status, body, headers) used in order, then
    `default` for the rest: one of those, or a function of the recorded request that
    returns one (an echo); `hold` makes it never answer (until the test ends), for the
    timeout test.
    """

    def __init__(self, default=(200, b"{}")):
        self.requests: list = []
        self.replies: list = []
        self.default = default
        self.hold = False
        self.released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = {"method": self.command, "path": self.path,
                           "headers": {k.lower(): v for k, v in self.headers.items()},
                           "body": body}
                receiver.requests.append(request)
                if receiver.hold:
                    receiver.released.wait()
                    return
                answer = receiver.replies.pop(0) if receiver.replies else receiver.default
                status, reply, *headers = answer(request) if callable(answer) else answer
                self.send_response(status)
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _record

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def last(self) -> dict:
        assert len(self.requests) == 1, self.requests
        return self.requests[0]

    def fail_times(self, count: int, status: int = 500, body: bytes = b"boom\nsecond line") -> None:
        self.replies.extend([(status, body)] * count)

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
