"""Load and validate the YAML config. Every error names the file and the key, so a typo is fixed
from the one line it produces."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from indexer import neutral
from indexer.configpaths import ConfigLocation  # where the config is found: import-light, for search.warm
from indexer.errors import ConfigError
from indexer.globs import FileSelection, glob_problem
from indexer.known_models import LOCAL_WINDOW, known_window, uses_xlm_r_vocabulary
from indexer.redaction import is_postgres_url
from indexer.useryaml import InvalidYaml, load_yaml
from indexer.windows import ESTIMATE_OVERHEAD, ESTIMATE_VERSION, WINDOWS_VERSION, estimate_tokens

MAX_CONFIG_BYTES = 1 << 20  # a config is a few hundred bytes; parsing megabytes of YAML takes seconds
# Upper bounds keep every number within what the code below it can use (an index-sized int for a
# read(), sqlite-vec's vector size limit, a finite timeout) instead of failing deep inside a sync.
MAX_FILE_BYTES_LIMIT = 1 << 30
MAX_DIMS = 8192  # sqlite-vec's limit on a vector column
MAX_BATCH = 4096
MAX_RETRIES = 20
MAX_TIMEOUT = 86_400.0
MAX_KEEP_ALIVE = 10 * 365 * 86_400.0  # -1 (for ever) is the usual value; infinity is not JSON
LOCAL_MODEL = "multilingual-e5-small"
PROVIDERS = ("local", "ollama", "openai")
MIN_MAX_TOKENS = 16  # a window must hold a breadcrumb and a few words
MAX_MAX_TOKENS = 1 << 20
# a window must hold the passage prefix, the model's own tokens and a few words of the text
MIN_WINDOW_TEXT_TOKENS = 8


@dataclass(frozen=True)
class EmbeddingConfig:
    """`embedding:`: which model makes the vectors, where it runs and how it is asked."""

    provider: str = "local"
    model: str = LOCAL_MODEL
    endpoint: str | None = None
    dims: int = 384
    batch: int = 32
    keep_alive: int | float | str | None = -1
    query_prefix: str = "query: "
    passage_prefix: str = "passage: "
    timeout: float = 60.0
    retries: int = 3
    # seconds one embedding request may take over all its attempts and the waits between them
    # (the first attempt keeps its whole timeout): a hanging server holds a sync's lock no longer
    retry_budget_s: float = 60.0
    api_key_env: str = "OPENAI_API_KEY"
    language_neutral: bool = True  # store vectors with each language's offset removed (indexer.neutral)
    max_tokens: int | None = None  # tokens the model reads per input; None: known_window()

    @property
    def window(self) -> int:
        """Tokens per window (prefix and special tokens included): a longer chunk is embedded as
        windows of this size (the model's window for a server, LOCAL_WINDOW for the local engine)."""
        return self.max_tokens if self.max_tokens is not None else known_window(self.provider, self.model)

    def identity(self) -> dict[str, str]:
        """What must match between the index and the config for vectors to be comparable."""
        return {
            "embedding_model": self.model,
            "embedding_dims": str(self.dims),
            "query_prefix": self.query_prefix,
            "passage_prefix": self.passage_prefix,
            "normalized": "1",
            VECTOR_SPACE_KEY: neutral.definition(self.language_neutral),
            WINDOW_KEY: f"{self.window} tokens, windows {WINDOWS_VERSION}{self._counted_by}",
        }

    @property
    def counts_exactly(self) -> bool:
        """Whether windows are counted in the model's own tokens (the local engine, or a server
        of the XLM-R vocabulary the engine bundles) rather than by `estimate_tokens`."""
        return self.provider == "local" or uses_xlm_r_vocabulary(self.model)

    @property
    def _counted_by(self) -> str:
        """How a server's windows are counted, for the identity: another count cuts other
        windows. The local engine's identity predates the choice and stays as it was."""
        if self.provider == "local":
            return ""
        return ", counted by the XLM-R tokenizer" if self.counts_exactly else f", estimate {ESTIMATE_VERSION}"


VECTOR_SPACE_KEY = "vector_space"  # how stored vectors relate to the embedder's output
# the model's window and how chunks are cut into windows (indexer.windows): a chunk's vector
# depends on both
WINDOW_KEY = "embedding_window"
UNRECORDED: dict[str, tuple[str, ...]] = {
    VECTOR_SPACE_KEY: (neutral.definition(False), neutral.definition(True)),
}
WALKED_FILES_KEY = "walked_files:"  # + a workspace source's id: its file count at its last whole walk
GIT_COLLECTIONS_KEY = "collections_rev:"  # + a git source's id: the rev its collections were read at
SAID_ERROR_KEY = "said_error:"  # + a source's id: the error the `sync` command last said of it


def identity_mismatch(config: EmbeddingConfig, meta: dict[str, str]) -> list[str]:
    """Human descriptions of every identity key where the index and the config disagree.

    An index written before the vector space was recorded holds raw vectors and no language
    statistics, which is also a valid neutral space (no offsets yet): it is adopted as it is
    (sync records the key) rather than re-embedded. One written before the window was recorded
    holds a vector per chunk, not per window: it is embedded again."""
    return [
        f"{key}: index has {meta.get(key)!r}, config asks for {value!r}"
        for key, value in config.identity().items()
        if meta.get(key) != value and not (key not in meta and value in UNRECORDED.get(key, ()))
    ]


def unrecorded_identity(config: EmbeddingConfig, meta: dict[str, str]) -> dict[str, str]:
    """The identity keys an older index never recorded and whose value it holds anyway: what
    sync records instead of re-embedding."""
    return {
        key: value
        for key, value in config.identity().items()
        if key not in meta and (key == VECTOR_SPACE_KEY or value in UNRECORDED.get(key, ()))
    }


DEFAULT_RRF_K = 60
MAX_RRF_K = 100_000


@dataclass(frozen=True)
class SearchConfig:
    """`search:`: how the keyword and the meaning halves are fused."""

    # the fusion constant: on held-out real notes MRR was 0.917 at 60 and 0.889 at 10, while the
    # public sets prefer smaller values, so the default follows the real notes
    rrf_k: int = DEFAULT_RRF_K


@dataclass(frozen=True)
class WorkspaceSource:
    """A folder on this machine, walked and read in place (never written to)."""

    id: str
    root: Path
    selection: FileSelection
    kind: str = "workspace"


@dataclass(frozen=True)
class GitSource:
    """A git repository, read from a bare mirror notes-search keeps and fetches."""

    id: str
    url: str
    mirror: Path
    branch: str | None
    selection: FileSelection
    kind: str = "git"
    checkout: Path | None = None  # the user's own working copy: hits open there (never written to)


Source = WorkspaceSource | GitSource


@dataclass(frozen=True)
class Config:
    """The whole config file, checked: paths absolute, every source by its id."""

    path: Path | None
    root: Path
    db: Path  # the SQLite index file; with `db_url`, its folder still holds this host's local state
    log: Path
    embedding: EmbeddingConfig
    sources: dict[str, Source] = field(default_factory=dict)
    max_file_bytes: int = 5_000_000
    search: SearchConfig = field(default_factory=SearchConfig)
    db_url: str | None = None  # `db: postgresql://...`: the index lives on that PostgreSQL server

    @property
    def index_location(self) -> Path | str:
        """Where the index is: the PostgreSQL URL, or the SQLite file (what `open_store` takes)."""
        return self.db_url if self.db_url is not None else self.db

    @property
    def lock_path(self) -> Path:
        return self.db.parent / ".notes-sync.lock"

    @property
    def toc_dir(self) -> Path:
        return self.db.parent / "toc"

    def source(self, source_id: str) -> Source:
        try:
            return self.sources[source_id]
        except KeyError:
            known = ", ".join(sorted(self.sources)) or "none"
            raise ConfigError(f"unknown source {source_id!r} (configured: {known})") from None


TOP_KEYS = {"root", "db", "log", "embedding", "sources", "max_file_bytes", "search"}
SEARCH_KEYS = {"rrf_k"}
EMBEDDING_KEYS = {
    "provider",
    "model",
    "endpoint",
    "dims",
    "batch",
    "keep_alive",
    "query_prefix",
    "passage_prefix",
    "timeout",
    "retries",
    "retry_budget_s",
    "api_key_env",
    "language_neutral",
    "max_tokens",
}
GIT_KEYS = {"url", "mirror", "branch", "checkout", "paths", "include", "exclude"}
WORKSPACE_KEYS = {"root", "paths", "include", "exclude"}
WORKSPACE_GROUPS = ("workspace", "nanobot")


class _Checker:
    """Validates one mapping and raises errors of the form `file: key.path: problem`."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError.at(self.file, key, problem)

    def mapping(self, value: Any, key: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if not isinstance(k, str):
                raise self.fail(key, f"keys must be strings, got {k!r}")
        return value

    def known(self, value: dict[str, Any], allowed: set[str], key: str) -> None:
        for k in value:
            if k not in allowed:
                name = f"{key}.{k}" if key else k
                raise self.fail(name, f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a non-empty string, got {value!r}")
        if "\0" in value:
            raise self.fail(key, "must not contain a NUL character")
        return value

    def integer(self, value: Any, key: str, minimum: int = 1, maximum: int = 1 << 31) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise self.fail(key, f"expected an integer from {minimum} to {maximum}, got {value!r}")
        return value

    def number(self, value: Any, key: str, maximum: float = MAX_TIMEOUT) -> float:
        if (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= maximum)
        ):  # also refuses NaN, which compares false
            raise self.fail(key, f"expected a number above 0 and at most {maximum:g}, got {value!r}")
        return float(value)

    def globs(self, value: Any, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        if value is None:
            return default
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, f"expected a list of glob strings, got {value!r}")
        for v in value:
            if v.startswith("/") or ".." in v.split("/"):
                raise self.fail(key, f"glob must be relative and stay inside the source: {v!r}")
            if (problem := glob_problem(v)) is not None:
                raise self.fail(key, problem)
        return tuple(value)


_VARIABLE = re.compile(r"\$(?:\$|\{(\w+)\}|(\w+))")


def _expand(value: str, key: str, c: _Checker) -> str:
    """`~` and `$NAME` / `${NAME}` in a path, alike for every path key; `$$` is a literal `$`.
    An unset or empty variable is an error: silently keeping `$HOME` as a folder name, or
    turning `$UNSET/notes` into `/notes`, would put files where nobody meant them."""

    def variable(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name is None:
            return "$"
        setting = os.environ.get(name)
        if not setting:
            raise c.fail(key, f"environment variable ${name} is {'empty' if setting == '' else 'not set'}")
        return setting

    return os.path.expanduser(_VARIABLE.sub(variable, value))


def literal_path(path: str) -> str:
    """The text for a path key that reads back as exactly `path`: path keys expand `~` and `$NAME`,
    so a folder literally named `~` or `$HOME` written as is would point somewhere else."""
    text = path.replace("$", "$$")
    return "./" + text if text.startswith("~") else text


def _resolve(base: Path, value: str, key: str, c: _Checker) -> Path:
    path = Path(_expand(value, key, c))
    return path if path.is_absolute() else (base / path)


def _resolve_url(base: Path, url: str, key: str, c: _Checker) -> str:
    """Local-path remotes are relative to `root` like every other path; real URLs stay as written."""
    if "://" in url:
        return url
    before_slash = url.split("/", 1)[0]
    if ":" in before_slash and not Path(url).exists():
        return url  # scp-style: user@host:repo.git
    return str(_resolve(base, url, key, c))


def _embedding(raw: dict[str, Any], c: _Checker) -> EmbeddingConfig:
    c.known(raw, EMBEDDING_KEYS, "embedding")
    provider = raw.get("provider")
    if provider is None:
        provider = "ollama" if raw.get("endpoint") else "local"
    if provider not in PROVIDERS:
        raise c.fail("embedding.provider", f"expected one of {', '.join(PROVIDERS)}, got {provider!r}")
    local = provider == "local"
    model = raw.get("model", LOCAL_MODEL if local else None)
    if model is None:
        raise c.fail("embedding.model", f"required for provider {provider} (write the tag explicitly)")
    model = c.string(model, "embedding.model")
    if local and model != LOCAL_MODEL:
        raise c.fail("embedding.model", f"the local provider bundles only {LOCAL_MODEL}, got {model!r}")
    endpoint = raw.get("endpoint")
    if local and endpoint is not None:
        raise c.fail("embedding.endpoint", "the local provider runs in process and takes no endpoint")
    if not local:
        endpoint = c.string(endpoint, "embedding.endpoint").rstrip("/")
        if not endpoint.startswith(("http://", "https://")):
            raise c.fail("embedding.endpoint", f"expected an http(s) URL, got {endpoint!r}")
        _check_url(endpoint, "embedding.endpoint", c)
    if "dims" in raw:
        dims = c.integer(raw["dims"], "embedding.dims", maximum=MAX_DIMS)
    elif local:
        dims = 384
    else:
        raise c.fail("embedding.dims", f"required for provider {provider} (the model's vector size)")
    if local and dims != 384:
        raise c.fail("embedding.dims", f"{LOCAL_MODEL} has 384 dimensions, got {dims}")
    keep_alive = raw.get("keep_alive", -1)
    if isinstance(keep_alive, str):
        with contextlib.suppress(ValueError):  # a duration string such as "24h" is valid for Ollama as is
            keep_alive = float(keep_alive) if "." in keep_alive else int(keep_alive)
    if (
        isinstance(keep_alive, bool)
        or not isinstance(keep_alive, (int, float, str))
        or (not isinstance(keep_alive, str) and not abs(keep_alive) <= MAX_KEEP_ALIVE)
    ):  # NaN too
        raise c.fail(
            "embedding.keep_alive",
            f"expected a number of seconds up to {MAX_KEEP_ALIVE:g} "
            f"(or a duration like '24h'), got {raw['keep_alive']!r}",
        )
    default_q, default_p = ("query: ", "passage: ") if local else ("", "")
    query_prefix = raw.get("query_prefix", default_q)
    passage_prefix = raw.get("passage_prefix", default_p)
    for name, value in (("query_prefix", query_prefix), ("passage_prefix", passage_prefix)):
        if not isinstance(value, str):
            raise c.fail(f"embedding.{name}", f"expected a string, got {value!r}")
    if local and (query_prefix, passage_prefix) != ("query: ", "passage: "):
        raise c.fail("embedding.query_prefix", "the local e5 model uses 'query: ' / 'passage: ' and adds them itself")
    if provider == "ollama" and ":" not in model.rsplit("/", 1)[-1]:
        # without a tag Ollama takes ':latest', which for some models is a far larger variant
        raise c.fail(
            "embedding.model",
            f"write the Ollama tag explicitly as name:tag "
            f"(e.g. 'qwen3-embedding:0.6b'; `ollama list` shows them), got {model!r}",
        )
    language_neutral = raw.get("language_neutral", True)
    if not isinstance(language_neutral, bool):
        raise c.fail("embedding.language_neutral", f"expected true or false, got {language_neutral!r}")
    max_tokens = raw.get("max_tokens")
    if max_tokens is not None:
        max_tokens = c.integer(max_tokens, "embedding.max_tokens", minimum=MIN_MAX_TOKENS, maximum=MAX_MAX_TOKENS)
        if local:
            raise c.fail(
                "embedding.max_tokens",
                f"the local engine's window is fixed ({LOCAL_WINDOW} tokens; its model reads 512)",
            )
    if not local:
        _check_room_for_text(max_tokens, provider, model, passage_prefix, c)
    return EmbeddingConfig(
        provider=provider,
        model=model,
        endpoint=endpoint,
        dims=dims,
        batch=c.integer(raw.get("batch", 32), "embedding.batch", maximum=MAX_BATCH),
        keep_alive=keep_alive,
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
        timeout=c.number(raw.get("timeout", 60.0), "embedding.timeout"),
        retries=c.integer(raw.get("retries", 3), "embedding.retries", minimum=0, maximum=MAX_RETRIES),
        retry_budget_s=c.number(raw.get("retry_budget_s", 60.0), "embedding.retry_budget_s"),
        api_key_env=c.string(raw.get("api_key_env", "OPENAI_API_KEY"), "embedding.api_key_env"),
        language_neutral=language_neutral,
        max_tokens=max_tokens,
    )


def _check_room_for_text(max_tokens: int | None, provider: str, model: str, prefix: str, c: _Checker) -> None:
    """Every window repeats the passage prefix and the model's own tokens: a window with no room
    left for text would cut each chunk into windows of a character or two, each over the limit.
    The prefix is estimated (an exact count would load the tokenizer on every command)."""
    reads = known_window(provider, model)
    window = max_tokens if max_tokens is not None else reads
    # every command parses the config: an ASCII prefix (at most a token a character, the
    # estimate's overhead and one for rounding) that surely fits is not estimated
    if prefix.isascii() and window - (ESTIMATE_OVERHEAD + len(prefix) + 1) >= MIN_WINDOW_TEXT_TOKENS:
        return
    taken = estimate_tokens(prefix)
    if window - taken >= MIN_WINDOW_TEXT_TOKENS:
        return
    key = "embedding.max_tokens" if max_tokens is not None else "embedding.passage_prefix"
    needed = taken + MIN_WINDOW_TEXT_TOKENS
    # a larger max_tokens helps only up to what the model reads: past that the server cuts
    fix = (
        f"max_tokens must be at least {needed}, or the prefix shorter"
        if needed <= reads
        else f"the prefix must be shorter ({model} reads {reads} tokens)"
    )
    raise c.fail(
        key,
        f"a window of {window} tokens leaves no room for text after the passage prefix and the model's own"
        f" tokens (about {taken}): {fix}",
    )


def _search(raw: dict[str, Any], c: _Checker) -> SearchConfig:
    c.known(raw, SEARCH_KEYS, "search")
    return SearchConfig(rrf_k=c.integer(raw.get("rrf_k", DEFAULT_RRF_K), "search.rrf_k", maximum=MAX_RRF_K))


BAD_SOURCE_ID = "source id must be a non-empty string without ':', '/' or a control character"
BAD_NEW_SOURCE_ID = "a new source id is typed in commands: letters, digits, '.', '_' and '-' only"


def is_source_id(source_id: object) -> bool:
    # ':' ends the id in a ref, '/' would read as a folder; NUL: PostgreSQL text holds none,
    # and a root collection is named after its source; a control or format character (an
    # escape, a bidi override) would reach every listing and cannot be typed back
    return (
        isinstance(source_id, str)
        and bool(source_id)
        and not any(bad in source_id for bad in ":/")
        and not any(unicodedata.category(ch) in ("Cc", "Cf") for ch in source_id)
    )


def is_new_source_id(source_id: str) -> bool:
    """What `source add` and `init` take: an id a command line carries unquoted (`--source
    bad name` would be two words). A config may hold others, as it always could."""
    return is_source_id(source_id) and all(ch.isalnum() or ch in "._-" for ch in source_id)


def _check_id(source_id: Any, key: str, c: _Checker) -> str:
    if not is_source_id(source_id):
        raise c.fail(key, BAD_SOURCE_ID)
    return str(source_id)


def _sources(raw: dict[str, Any], root: Path, c: _Checker) -> dict[str, Source]:
    allowed = {"git", *WORKSPACE_GROUPS}
    c.known(raw, allowed, "sources")
    sources: dict[str, Source] = {}
    seen_at: dict[str, str] = {}

    def add(source: Source, key: str) -> None:
        if source.id in sources:
            raise c.fail(key, f"source id {source.id!r} is already used at {seen_at[source.id]}")
        sources[source.id] = source
        seen_at[source.id] = key

    for source_id, spec in c.mapping(raw.get("git"), "sources.git").items():
        key = f"sources.git.{source_id}"
        _check_id(source_id, key, c)
        spec = c.mapping(spec, key)
        c.known(spec, GIT_KEYS, key)
        url = _resolve_url(root, c.string(spec.get("url"), f"{key}.url"), f"{key}.url", c)
        mirror = _resolve(
            root, c.string(spec.get("mirror", f"mirrors/{source_id}.git"), f"{key}.mirror"), f"{key}.mirror", c
        )
        branch = spec.get("branch")
        if branch is not None:
            branch = c.string(branch, f"{key}.branch")
        scope = FileSelection(
            paths=c.globs(spec.get("paths"), f"{key}.paths", ("**",)),
            include=c.globs(spec.get("include"), f"{key}.include", ("*.md",)),
            exclude=c.globs(spec.get("exclude"), f"{key}.exclude", ()),
        )
        checkout = None
        if spec.get("checkout") is not None:
            checkout = Path(
                os.path.abspath(_resolve(root, c.string(spec["checkout"], f"{key}.checkout"), f"{key}.checkout", c))
            )
            if not checkout.is_dir():  # a typo would open every hit in a temp copy, unexplained
                raise c.fail(f"{key}.checkout", f"not an existing folder: {checkout}")
        add(
            GitSource(id=source_id, url=url, mirror=mirror, branch=branch, selection=scope, checkout=checkout),
            key,
        )

    for group in WORKSPACE_GROUPS:
        for source_id, spec in c.mapping(raw.get(group), f"sources.{group}").items():
            key = f"sources.{group}.{source_id}"
            _check_id(source_id, key, c)
            spec = c.mapping(spec, key)
            c.known(spec, WORKSPACE_KEYS, key)
            source_root = _resolve(root, c.string(spec.get("root", "."), f"{key}.root"), f"{key}.root", c)
            if "paths" not in spec:
                raise c.fail(
                    f"{key}.paths", "workspace sources are opt-in: list the folders to index (e.g. ['notes/**'])"
                )
            scope = FileSelection(
                # opt-in: an empty `paths:` selects nothing (and sync warns), never the whole root
                paths=c.globs(spec.get("paths"), f"{key}.paths", ()),
                include=c.globs(spec.get("include"), f"{key}.include", ("*.md",)),
                exclude=c.globs(spec.get("exclude"), f"{key}.exclude", ()),
            )
            add(WorkspaceSource(id=source_id, root=source_root, selection=scope), key)
    return sources


def _check_url(url: str, key: str, c: _Checker) -> None:
    """A URL that urllib cannot split (an unclosed `[`, a port above 65535) would otherwise fail as
    a traceback at the first embedding request, after the sync has stored the text."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it validates the port range
    except ValueError:
        raise c.fail(key, f"not a valid URL ({url!r})") from None
    if not parts.hostname:
        raise c.fail(key, f"not a valid URL: no host ({url!r})")


def parse_config(text: str, file: str = "<config>", base: Path | None = None) -> Config:
    c = _Checker(file)
    try:
        raw = load_yaml(text, file)
    except RecursionError:
        raise c.fail("", "invalid YAML: nested too deeply") from None
    except InvalidYaml as exc:
        where = f" (line {exc.line}, column {exc.column})" if exc.line is not None else ""
        problem = exc.problem or str(exc).splitlines()[0]
        raise c.fail("", f"invalid YAML{where}: {problem}") from None
    raw = c.mapping(raw, "")
    c.known(raw, TOP_KEYS, "")
    base = base if base is not None else Path.cwd()
    root = _resolve(base, c.string(raw.get("root", "."), "root"), "root", c).resolve()
    db_value = c.string(raw.get("db", DEFAULT_DB), "db")
    db_url = _db_url(_expand(db_value, "db", c), c)
    db = _resolve(root, DEFAULT_DB if db_url else db_value, "db", c)
    log = _resolve(root, c.string(raw.get("log", "log/notes_sync.log"), "log"), "log", c)
    if not db_url and _same_file(db, log):
        # the log would be appended to the index (or a read-only command would create an empty
        # file where the index should be, and call it schema 0)
        raise c.fail("log", f"names the same file as `db:` ({db}); give the log a file of its own")
    embedding = _embedding(c.mapping(raw.get("embedding"), "embedding"), c)
    sources = _sources(c.mapping(raw.get("sources"), "sources"), root, c)
    for key, path in (("db", None if db_url else db), ("log", log)):
        if path is not None:
            _outside_notes(path, key, sources, c)
    max_bytes = c.integer(raw.get("max_file_bytes", 5_000_000), "max_file_bytes", maximum=MAX_FILE_BYTES_LIMIT)
    search = _search(c.mapping(raw.get("search"), "search"), c)
    return Config(
        path=Path(file) if file != "<config>" else None,
        root=root,
        db=db,
        log=log,
        embedding=embedding,
        sources=sources,
        max_file_bytes=max_bytes,
        search=search,
        db_url=db_url,
    )


DEFAULT_DB = "db/notes-index.sqlite"


_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _outside_notes(path: Path, key: str, sources: dict[str, Source], c: _Checker) -> None:
    """The index and the log are ours, written on every sync: inside the notes a workspace source
    indexes they would be files written into the user's folder (and a watcher would see each
    write). A folder the source's `paths` leave out is not its notes."""
    parent = path.resolve().parent
    for source in sources.values():
        if not isinstance(source, WorkspaceSource):
            continue  # a git source is read from its mirror, which is ours
        try:
            folder = parent.relative_to(source.root.resolve()).as_posix()
        except ValueError:
            continue
        # a hidden folder the source leaves out (`.cache/`) is still the user's folder
        if source.selection.may_contain("" if folder == "." else folder, hidden_too=True):
            raise c.fail(
                key,
                f"{path} lies inside the notes of source {source.id!r} ({source.root}), and notes-search "
                "never writes into your notes: put it outside that folder (or leave its folder out of `paths`)",
            )


def _same_file(first: Path, second: Path) -> bool:
    """Whether two paths name one file (the same path, or links to one existing file)."""
    if first.resolve() == second.resolve():
        return True
    try:
        return first.samefile(second)
    except OSError:
        return False


def _db_url(value: str, c: _Checker) -> str | None:
    """`db:` after expansion (`db: $NOTES_DB` may hold the whole URL): see index_url."""
    try:
        return index_url(value)
    except ValueError as exc:
        raise c.fail("db", str(exc)) from None


def index_url(value: str) -> str | None:
    """The PostgreSQL URL an index location names, or None for a SQLite file path; ValueError
    says what is wrong. Checked before any connection, so a typo is one clear line, not a
    failure in the middle of a sync; and any other `scheme://` is refused, since read as a path
    a typo'd or foreign URL would quietly build a SQLite index in a folder named after it."""
    if not is_postgres_url(value):
        if _URL_SCHEME.match(value):
            raise ValueError(
                f"expected a SQLite file path or a postgresql:// URL, got a {value.split(':', 1)[0]}:// URL"
            )
        return None
    from indexer.redaction import PERCENT_ENCODED, describe_url, password_needs_encoding  # URLs only

    if password_needs_encoding(value):
        raise ValueError(f"the password in {describe_url(value)} must be {PERCENT_ENCODED}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - reading it validates the port range
    except ValueError:
        raise ValueError("not a valid PostgreSQL URL") from None
    if not parts.path.strip("/"):
        raise ValueError("a PostgreSQL URL must name the database: postgresql://user@host/dbname")
    if "/" in parts.path.strip("/"):
        raise ValueError(f"not a database name: {parts.path.strip('/')!r} (postgresql://user@host/dbname)")
    return value


def load_config(path: str | os.PathLike[str]) -> Config:
    path = Path(path)
    return parse_config(_read_config_text(path), file=str(path), base=path.resolve().parent)


def _read_config_text(path: Path) -> str:
    return read_user_file(path, "config")


def read_user_file(path: Path, what: str) -> str:
    """The text of a file the user hands us (the config, an eval question file), from a regular
    file of at most MAX_CONFIG_BYTES. Opened without blocking, so a FIFO cannot hang us, and
    checked on the open descriptor itself; a device such as /dev/null is refused rather than
    read as an empty file. `what` names the file in every error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        missing = (
            "config file not found (create one with `notes-search init DIR`)" if what == "config" else f"no such {what}"
        )
        raise ConfigError(f"{path}: {missing}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{path}: is a folder, not a {what} file")
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: not a regular file (a {what} must be a YAML file)")
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: {what} is {info.st_size} bytes; the limit is {MAX_CONFIG_BYTES} (1 MiB)")
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:  # grew between fstat and read
        raise ConfigError(f"{path}: {what} is over the limit of {MAX_CONFIG_BYTES} bytes (1 MiB)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read {what}: not UTF-8 ({exc.reason} at byte {exc.start})") from None


def selection_warnings(config: Config) -> list[str]:
    """Why a valid config would index nothing: said once per sync, since a sync that silently
    does nothing looks exactly like one that is up to date."""
    if not config.sources:
        where = str(config.path) if config.path else "the config"
        return [f"{where} selects nothing: it configures no sources (see sources.workspace / sources.git)"]
    warnings = []
    for source in config.sources.values():
        for key in ("paths", "include"):
            if not getattr(source.selection, key):
                warnings.append(f"source {source.id} selects nothing: its {key} list is empty")
    return warnings


def load_located_config(location: ConfigLocation) -> Config:
    """The config at `location`; when discovery found none, one line naming every place looked at."""
    if not location.found and location.looked_at:
        places = " nor ".join(str(p) for p in location.looked_at)
        raise ConfigError(
            f"no config found: neither {places} exists (create one with `notes-search init DIR`, or pass --config)"
        )
    return load_config(location.path)


STARTER_CONFIG = """\
# notes-search config. Paths are relative to `root` (default: this file's folder).
root: {root}
db: db/notes-index.sqlite
log: log/notes_sync.log
embedding:
  provider: local              # local | ollama | openai
  model: multilingual-e5-small
  dims: 384
  batch: 32
sources:
  workspace:
    {source_id}:
      root: {notes_root}
      paths: ["**"]            # whitelist: only what matches is indexed
      include: ["*.md"]
      exclude: []
"""
