"""Plain data passed between the stages: source drivers -> chunker -> store."""

from __future__ import annotations

from dataclasses import dataclass, field

# how a chunk's breadcrumb is written (the chunker) and read (a hit names its match line's section)
BREADCRUMB_SEPARATOR = " > "
BREADCRUMB_MAX_CHARS = 300


@dataclass(frozen=True)
class Chunk:
    """One retrieval unit: a heading section (or part of one) with its exact line span."""

    idx: int
    breadcrumb: str  # "file title > section > subsection"
    text: str  # the chunk's markdown, as in the source lines start_line..end_line
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive

    @property
    def embed_text(self) -> str:
        """What the embedder sees: context (breadcrumb) first, then the body."""
        return f"{self.breadcrumb}\n\n{self.text}"


@dataclass(frozen=True)
class ParsedDocument:
    """A note as the chunker read it: its metadata and its chunks."""

    title: str
    tags: list[str] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)  # H1-H3 texts in document order
    doc_id: str | None = None  # front matter `id`
    updated: str | None = None  # front matter `updated`, as written
    chunks: list[Chunk] = field(default_factory=list)
    front_matter_problem: str | None = None  # broken YAML, a key written twice: said at sync, kept for `status`


@dataclass(frozen=True)
class FileVersion:
    """A file's content as a source driver read it (no DB access involved)."""

    path: str  # relative to the source root, '/'-separated
    text: str
    sha256: str
    size: int
    mtime: float | None  # workspace: st_mtime; git: None
    updated_at: float  # recency for tie-breaking: mtime, or commit time of the last change
    collection: str | None = None


@dataclass(frozen=True)
class Upsert:
    """A file that is new or whose content changed: the store re-chunks it."""

    file: FileVersion


@dataclass(frozen=True)
class Delete:
    """A file the index holds that is to go: gone from the source, no longer admitted, or no
    longer indexable."""

    path: str


@dataclass(frozen=True)
class Touch:
    """Stat changed but content did not: refresh size/mtime so the next scan stays cheap."""

    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class Skipped:
    """A file the driver could not index (binary, invalid UTF-8, too large, vanished)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Unlisted:
    """A folder the driver could not list (permissions, I/O): the index keeps what it holds below
    it (`kept` files) instead of taking its files for deleted; a later scan picks it up again."""

    path: str  # '' for the source root
    reason: str
    kept: int


@dataclass(frozen=True)
class CollectionProblem:
    """A `_meta.yaml` the driver could not take as written (malformed, not a mapping, a name
    another folder holds): the collection falls back to its folder's name and the sync says so."""

    path: str  # the `_meta.yaml` file, relative to the source root
    problem: str


Change = Upsert | Delete | Touch | Skipped | Unlisted | CollectionProblem


@dataclass(frozen=True)
class KnownFile:
    """What the store remembers of a file, handed to drivers for change detection."""

    sha256: str
    size: int
    mtime: float | None
