"""py3langid's tables for the candidate languages, kept uncompressed in the user's cache folder.

py3langid ships its model LZMA-compressed, and decompressing it costs about half a second in
every process: most of a one-shot query. The first process that needs the tables writes them,
already narrowed to the candidate languages, as one flat file that later processes map into
memory and read only where a text's bytes lead (a query touches a few pages of it).

The file's name carries py3langid's version, the SHA-256 of its model file and what is taken
from it, so an upgrade or another candidate set simply uses another file. It is written under
a temporary name and renamed into place: two processes racing write the same bytes and the
last rename wins, and a reader never sees half a file. A file that is cut short, not ours or
fails its checksum is ignored and written again; a cache folder that cannot be written only
costs the decompression, every time. Files for another py3langid stay (several installations
may share the folder and switch back); removing the folder is always safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexer.cachefolder import cache_folder, write_atomically

if TYPE_CHECKING:
    import numpy
    from numpy.typing import NDArray
    from py3langid.langid import LanguageIdentifier

# what a file of this layout starts with; a change of layout changes it (and the file's name)
_MAGIC = b"NSLANGID\x01\n"
_HEADER_SIZE = struct.Struct("<I")
_ALIGN = 64
# (name, numpy dtype, memoryview format): the arrays, in the file's order
_ARRAYS = (
    ("prior", "<f8", "d"),
    ("rows", "<i8", "q"),
    ("output", "<i8", "q"),
    ("table", "<f4", "f"),
    ("nextmove", "<u4", "I"),
)
# the small arrays are checksummed on every load; the two large ones (47 MB together) are
# trusted as written whole under a temporary name, as hashing them would cost more than they save
_CHECKED = ("prior", "rows", "output")
_FILE_PREFIX = "langid-"
_DIGESTS = "langid-models.json"


@dataclass(frozen=True)
class Tables:
    """The classifier narrowed to `labels`: naive Bayes weights (`table`: features x labels,
    `prior`) and the byte automaton (`nextmove[rows[state] + byte]` is the next state, `output`
    the feature a state completes or -1)."""

    labels: list[str]
    prior: NDArray[numpy.float64]
    rows: NDArray[numpy.int64]
    output: NDArray[numpy.int64]
    table: NDArray[numpy.float32]
    nextmove: NDArray[numpy.uint32]


def _model_file() -> Path:
    """py3langid's model, found without importing py3langid (its import loads numpy and more)."""
    import importlib.util

    spec = importlib.util.find_spec("py3langid")
    if spec is None or spec.origin is None:
        raise ImportError("py3langid is not installed")
    return Path(spec.origin).parent / "data" / "model.npz.xz"


def _py3langid_version(package: Path) -> str:
    """py3langid's `__version__`, read from its `__init__.py` rather than imported (its import
    loads numpy and more) or asked of importlib.metadata (which reads every distribution)."""
    try:
        found = re.search(
            r"""^__version__\s*=\s*['"]([^'"]+)['"]""", (package / "__init__.py").read_text("utf-8"), re.M
        )
    except (OSError, UnicodeDecodeError):
        found = None
    return re.sub(r"[^\w.+]", "_", found.group(1)) if found else "unknown"


def _model_digest(model: Path, folder: Path) -> str:
    """The model file's SHA-256 (its first 16 hex digits), remembered in the cache folder by the
    file's path, size, modification time and inode: hashing 4.5 MB in every process would cost
    more than the rest of a query's language detection."""
    stat = model.stat()
    signature = f"{model}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
    index = folder / _DIGESTS
    try:
        known = json.loads(index.read_bytes())
        if isinstance(known, dict) and isinstance(digest := known.get(signature), str):
            return digest
    except (OSError, ValueError):
        known = {}
    with open(model, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()[:16]
    if not isinstance(known, dict):
        known = {}
    known[signature] = digest
    with contextlib.suppress(OSError):  # a racing writer may drop this entry: it is only computed again
        write_atomically(index, json.dumps(known).encode())
    return digest


def cache_path(languages: tuple[str, ...]) -> Path:
    """Where the tables for `languages` from the installed py3langid are kept."""
    model = _model_file()
    folder = cache_folder()
    digest = _model_digest(model, folder)
    chosen = hashlib.sha256(",".join(languages).encode() + _MAGIC).hexdigest()[:8]
    version = _py3langid_version(model.parent.parent)
    return folder / f"{_FILE_PREFIX}{version}-{digest}-{chosen}.bin"


def library_identifier(languages: tuple[str, ...]) -> LanguageIdentifier:
    """py3langid's own identifier narrowed to those of `languages` its model knows (a model
    without one of them simply loses that candidate); decompressing it takes ~0.5 s."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    known = set(identifier.labels)
    identifier.set_languages([code for code in languages if code in known])
    return identifier


def tables_from_library(languages: tuple[str, ...]) -> Tables:
    """The tables read from py3langid's compressed model (the slow way)."""
    import numpy as np

    identifier = library_identifier(languages)
    return Tables(
        labels=list(identifier.nb_classes),
        prior=np.asarray(identifier.nb_pc, dtype=np.float64),
        rows=np.asarray(identifier.tk_row, dtype=np.int64) << 8,
        output=np.asarray(identifier.tk_output, dtype=np.int64),
        table=np.ascontiguousarray(identifier.nb_ptc, dtype=np.float32),
        nextmove=np.asarray(identifier.tk_nextmove, dtype=np.uint32),
    )


def _checksum(labels: list[str], arrays: dict[str, Any]) -> int:
    crc = zlib.crc32(json.dumps(labels).encode())
    for name in _CHECKED:
        crc = zlib.crc32(memoryview(arrays[name]).cast("B"), crc)
    return crc


def _serialise(tables: Tables) -> bytes:
    """The file's bytes: magic, header length, JSON header, then each array at an aligned offset."""
    arrays = {name: getattr(tables, name) for name, _, _ in _ARRAYS}
    layout: dict[str, list[Any]] = {}
    header: dict[str, Any] = {"labels": tables.labels, "arrays": layout, "crc": _checksum(tables.labels, arrays)}
    # the header's length does not depend on the offsets' digits: it is written with room to spare
    start = -(-(len(_MAGIC) + _HEADER_SIZE.size + len(json.dumps(header)) + 1024) // _ALIGN) * _ALIGN
    offset = start
    for name, dtype, _ in _ARRAYS:
        array = arrays[name]
        layout[name] = [dtype, list(array.shape), offset]
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    header["size"] = offset
    encoded = json.dumps(header).encode()
    parts = bytearray(_MAGIC + _HEADER_SIZE.pack(len(encoded)) + encoded)
    for name, dtype, _ in _ARRAYS:
        parts += b"\0" * (layout[name][2] - len(parts))
        parts += arrays[name].astype(dtype, copy=False).tobytes()
    parts += b"\0" * (offset - len(parts))
    return bytes(parts)


def _mapped(path: Path) -> Tables | None:
    """The tables in `path` mapped into memory, or None when the file is missing or not a
    whole, intact file of this layout."""
    import numpy as np

    try:
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # missing, unreadable, or empty (which mmap refuses)
        return None
    try:
        if mapped[: len(_MAGIC)] != _MAGIC:
            return None
        (length,) = _HEADER_SIZE.unpack_from(mapped, len(_MAGIC))
        header_start = len(_MAGIC) + _HEADER_SIZE.size
        header = json.loads(bytes(mapped[header_start : header_start + length]))
        if header["size"] != len(mapped):
            return None
        arrays: dict[str, Any] = {}
        for name, dtype, _ in _ARRAYS:
            stored_dtype, shape, offset = header["arrays"][name]
            if stored_dtype != dtype:
                return None
            count = int(np.prod(shape))
            arrays[name] = np.frombuffer(mapped, dtype=dtype, count=count, offset=offset).reshape(shape)
        labels = header["labels"]
        if not (isinstance(labels, list) and all(isinstance(label, str) for label in labels)):
            return None
        if _checksum(labels, arrays) != header["crc"]:
            return None
        return Tables(labels=labels, **arrays)
    except (ValueError, KeyError, TypeError, struct.error, json.JSONDecodeError):
        return None


def load_tables(languages: tuple[str, ...]) -> Tables:
    """The tables for `languages`: mapped from the cache folder, written there first when missing
    or damaged; read from py3langid's compressed model alone when the folder cannot be written."""
    try:
        path = cache_path(languages)
    except OSError:
        return tables_from_library(languages)
    tables = _mapped(path)
    if tables is not None:
        return tables
    tables = tables_from_library(languages)
    try:
        write_atomically(path, _serialise(tables))
    except OSError:
        return tables
    return _mapped(path) or tables
