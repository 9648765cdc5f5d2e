"""Protocol-faithful embedding servers on 127.0.0.1 for tests, with fault injection.

    with OllamaServer() as server:
        cfg = EmbeddingConfig(provider="ollama", model="fake-embed:latest", endpoint=server.url, dims=64)
        ...
        server.fail_next = 2          # next two embed requests answer 500
        server.embed_requests[0].json # what the client sent

Each server runs a ThreadingHTTPServer (HTTP/1.1, keep-alive like the real ones) in a background
thread; `stop()` wakes delayed handlers, closes open connections and joins every thread.
Vectors come from `tests.fakes.hash_vector`, so they are deterministic and meaningful-ish.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from tests.fakes import hash_vector

Reply = tuple[int, Any]  # (status, JSON-able body or bytes)


@dataclass(frozen=True)
class Recorded:
    """One request as received."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


class _HTTPServer(ThreadingHTTPServer):
    owner: FakeEmbedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that time out and hang up are part of the tests, not errors worth a traceback."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; avoid 40 ms stalls
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, True)

    def finish(self) -> None:
        self.server.owner._track(self.connection, False)
        super().finish()

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        reply = self.server.owner._dispatch(method, self.path, dict(self.headers.items()), raw)
        if reply is None:  # the server is stopping while this request was delayed
            self.close_connection = True
            return
        status, body = reply
        if isinstance(body, bytes):
            payload, content_type = body, "text/plain; charset=utf-8"
        else:
            payload, content_type = json.dumps(body).encode("utf-8"), "application/json; charset=utf-8"
        if status == 200 and self.path == self.server.owner.embed_path and self.server.owner.truncate:
            payload = payload[: len(payload) // 2]
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests assert on `requests`, not on logs."""


class FakeEmbedServer:
    """Shared machinery: lifecycle, request log and fault knobs for the embed route.

    Knobs (set any time, thread-safe enough for tests):
      fail_next: int        answer the next N embed requests with `fail_status` (default 500)
      delay: float          seconds to wait before answering embed requests (client timeouts)
      truncate: bool        cut successful embed replies in half (invalid JSON)
      wrong_dims: int|None  reply with vectors of this size instead of the model's
      drop_vectors: int     reply with this many fewer vectors than inputs
      zero_for: str|None    reply with an all-zero vector for each text containing this
      nested: bool          wrap each vector in a list of its own (an array of shape (n, 1, dims))
    """

    embed_path = ""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.fail_next = 0
        self.fail_status = 500
        self.delay = 0.0
        self.truncate = False
        self.wrong_dims: int | None = None
        self.drop_vectors = 0
        self.zero_for: str | None = None
        self.nested = False
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=type(self).__name__, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def embed_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST" and r.path == self.embed_path]

    def stop(self) -> None:
        """Stop serving and join every thread; safe to call twice."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._httpd.shutdown()
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)  # ends keep-alive reads in handler threads
        self._httpd.server_close()  # joins handler threads
        self._thread.join()

    def __enter__(self) -> FakeEmbedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _track(self, conn: socket.socket, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _dispatch(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply | None:
        with self._lock:
            self.requests.append(Recorded(method, path, headers, raw))
            injected = method == "POST" and path == self.embed_path and self.fail_next > 0
            if injected:
                self.fail_next -= 1
        if method == "POST" and path == self.embed_path:
            if injected:
                return self.fail_status, self.error(f"injected failure (HTTP {self.fail_status})")
            if self.delay and self._stopping.wait(self.delay):
                return None
        return self.route(method, path, headers, raw)

    def vectors(self, texts: list[str], dims: int) -> list[list[float]]:
        """hash_vector rows, bent by the wrong_dims / drop_vectors knobs."""
        dims = self.wrong_dims or dims
        kept = texts[: max(0, len(texts) - self.drop_vectors)]
        zero = self.zero_for
        rows = [[0.0] * dims if zero is not None and zero in t else hash_vector(t, dims).tolist() for t in kept]
        return [[row] for row in rows] if self.nested else rows  # type: ignore[misc]

    def route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        raise NotImplementedError

    def error(self, message: str) -> Any:
        raise NotImplementedError


# --- Ollama -------------------------------------------------------------------------------

_GO_DURATION = re.compile(r"[-+]?((\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h))+")
_GO_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)")


def _go_duration_error(text: str) -> str | None:
    """The error Go's time.ParseDuration gives for `text`, or None when it parses."""
    if text in ("0", "+0", "-0") or _GO_DURATION.fullmatch(text):
        return None
    quoted = json.dumps(text)
    if _GO_NUMBER.fullmatch(text):
        return f"time: missing unit in duration {quoted}"
    return f"time: invalid duration {quoted}"


def _canonical(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


class OllamaServer(FakeEmbedServer):
    """Ollama's `/api/embed`, `/api/tags`, `/api/version` as measured against a real Ollama server.

    `models` maps installed model tags to their vector size; a name without a tag means ":latest".
    """

    embed_path = "/api/embed"
    version = "0.12.3"

    def __init__(self, models: dict[str, int] | None = None) -> None:
        self.models = {_canonical(k): v for k, v in (models or {"fake-embed:latest": 64}).items()}
        super().__init__()

    def error(self, message: str) -> Any:
        return {"error": message}

    def route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        if method == "GET" and path == "/":
            return 200, b"Ollama is running"
        if method == "GET" and path == "/api/version":
            return 200, {"version": self.version}
        if method == "GET" and path == "/api/tags":
            return 200, {"models": [self._tag(name) for name in sorted(self.models)]}
        if method == "POST" and path == self.embed_path:
            return self._embed(raw)
        return 404, b"404 page not found"

    def _tag(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "model": name,
            "modified_at": "2025-01-01T00:00:00Z",
            "size": 0,
            "digest": "0" * 64,
            "details": {"format": "gguf", "family": "fake", "parameter_size": "0M", "quantization_level": "F16"},
        }

    def _embed(self, raw: bytes) -> Reply:
        if not raw:
            return 400, self.error("missing request body")
        try:
            req = json.loads(raw)
        except ValueError as exc:
            return 400, self.error(f"invalid character in request body: {exc}")
        if not isinstance(req, dict):
            return 400, self.error("json: cannot unmarshal array into Go value of type api.EmbedRequest")
        keep_alive = req.get("keep_alive")
        if isinstance(keep_alive, str):
            problem = _go_duration_error(keep_alive)
            if problem:
                return 400, self.error(problem)
        elif keep_alive is not None and (isinstance(keep_alive, bool) or not isinstance(keep_alive, (int, float))):
            return 400, self.error(f"Unsupported type: '{type(keep_alive).__name__}'")
        if "truncate" in req and not isinstance(req["truncate"], bool):
            return 400, self.error("json: cannot unmarshal into Go struct field EmbedRequest.truncate of type bool")
        inp = req.get("input")
        if isinstance(inp, str):
            texts = [inp] if inp else []
        elif isinstance(inp, list) and all(isinstance(t, str) for t in inp):
            texts = inp
        elif inp is None:
            texts = []
        else:
            return 400, self.error("invalid input type")
        model = req.get("model")
        name = _canonical(model) if isinstance(model, str) and model else ""
        if name not in self.models:
            return 404, self.error(f"model {json.dumps(model or '')} not found, try pulling it first")
        return 200, {
            "model": model,
            "embeddings": self.vectors(texts, self.models[name]),
            "total_duration": 1_000_000,
            "load_duration": 0,
            "prompt_eval_count": sum(len(t.split()) + 2 for t in texts),
        }


# --- OpenAI-compatible ----------------------------------------------------------------------

_OPENAI_PARAMS = {"model", "input", "encoding_format", "dimensions", "user"}


class OpenAIServer(FakeEmbedServer):
    """The OpenAI `/v1/embeddings` contract: unknown parameters are rejected (as OpenAI does),
    `api_key` enables Bearer checks, `reverse` returns `data` in reverse order (clients must
    use `index`)."""

    embed_path = "/v1/embeddings"

    def __init__(self, dims: int = 64, api_key: str | None = None, reverse: bool = False) -> None:
        self.dims = dims
        self.api_key = api_key
        self.reverse = reverse
        super().__init__()

    def error(self, message: str, kind: str = "server_error", code: str | None = None) -> Any:
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": "fake-embed", "object": "model", "owned_by": "tests"}]}
        if method != "POST" or path != self.embed_path:
            return 404, self.error(f"Invalid URL ({method} {path})", "invalid_request_error")
        if self.api_key and headers.get("Authorization") != f"Bearer {self.api_key}":
            return 401, self.error("Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        try:
            req = json.loads(raw)
        except ValueError:
            return 400, self.error("We could not parse the JSON body of your request.", "invalid_request_error")
        if not isinstance(req, dict):
            return 400, self.error("The request body must be a JSON object.", "invalid_request_error")
        unknown = sorted(set(req) - _OPENAI_PARAMS)
        if unknown:
            return 400, self.error(f"Unrecognized request argument supplied: {unknown[0]}", "invalid_request_error")
        inp = req.get("input")
        texts = [inp] if isinstance(inp, str) else inp
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            return 400, self.error("'$.input' is invalid.", "invalid_request_error")
        fmt = req.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            return 400, self.error(f"Invalid value for 'encoding_format': {fmt!r}", "invalid_request_error")
        dims = req.get("dimensions") or self.dims
        rows: list[Any] = self.vectors(texts, dims)
        if fmt == "base64":
            rows = [base64.b64encode(np.asarray(row, np.float32).tobytes()).decode() for row in rows]
        data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)]
        if self.reverse:
            data.reverse()
        tokens = sum(len(t.split()) for t in texts)
        return 200, {
            "object": "list",
            "data": data,
            "model": req.get("model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def free_port() -> int:
    """A 127.0.0.1 port that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def closed_port_url() -> str:
    """A 127.0.0.1 URL where nothing listens (connection refused)."""
    return f"http://127.0.0.1:{free_port()}"
