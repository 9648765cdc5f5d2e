"""A language-neutral vector space: what a chunk's language adds to its vector is taken out.

Multilingual encoders place every text near the other texts of its language, whatever it is
about ("language bias"): a Czech question's nearest passages are Czech ones. Each language's
passages sit around their own mean vector; moving every language's passages so that these
means coincide (Libovický et al. 2020, "On the Language Neutrality of Pre-trained Multilingual
Representations") leaves what the passages are about. Measured (bench/EVAL.md), the best
variant on every set moves each language's passages onto the *common* centre (the mean of the
language means) instead of onto zero: the shared component carries the model's anisotropy and
removing it costs same-language quality. Queries are left raw: their language offset then
weighs the same on every language's passages, and a query with no language (`Ctrl+Shift+I`)
is treated exactly as before.

The searched vectors are stored already neutralised (the store's vectors are "neutral space"),
so vec0, the exact scoped path and the in-memory copy answer alike and content-hash reuse stays
correct (identical text has the identical language and statistics). A unit raw vector `v` and
its language offset `o` give `n = unit(v - o)`; `restore` inverts that exactly (v is the point
of the ray `o + t n` at distance 1 from the origin), so statistics can be re-estimated from the
stored vectors without running the model again.

Statistics stay valid as notes are added by a bounded-drift rule: a language's mean is
estimated from this index's own chunks once it has MIN_CHUNKS of them and re-estimated only
when its chunk count has grown REESTIMATE_GROWTH-fold since (or a new language appears);
until then new vectors are neutralised with the frozen statistics, so every stored vector
always belongs to one consistent space. A language with fewer chunks uses the defaults shipped
for the model (indexer/data/<model>.json, made by tools/neutral_defaults.py from public text),
or no correction when the model has none. A monolingual index has a single mean, its offset is
zero and nothing changes. Chunks of unknown language are never moved.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy loads where vectors are touched; the config imports `definition`
    import numpy as np

METHOD = "lang-centre-v1"  # the definition of the statistics: changing it rebuilds the vectors
RAW = "raw"
MIN_CHUNKS = 20  # a mean from 20 chunks already gives most of the gain (bench/EVAL.md)
REESTIMATE_GROWTH = 2.0
UNKNOWN = "unknown"
STATS_KEY = "neutral_stats"  # meta key: the statistics as JSON (see NeutralSpace.to_json)
SUMMARY_KEY = "neutral_summary"  # meta key: NeutralSpace.summary(), read by --explain and status
DATA_DIR = Path(__file__).resolve().parent / "data"
INDEX = "index"
DEFAULT = "default"


@dataclass(frozen=True)
class LanguageStats:
    """One language's offset: the mean of its passages' vectors, and what it was estimated from."""

    mean: np.ndarray  # the mean raw (unit) passage vector of the language
    chunks: int  # chunks of this language in the index when the statistics were estimated
    origin: str  # INDEX (estimated from those chunks) or DEFAULT (shipped for the model)


@dataclass
class NeutralSpace:
    """Per-language statistics of one index, and the transform they define."""

    languages: dict[str, LanguageStats] = field(default_factory=dict)
    # the offsets of the statistics they were computed from (a sync neutralises page after page)
    _offsets: tuple[tuple[tuple[str, LanguageStats], ...], dict[str, np.ndarray]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def offsets(self) -> dict[str, np.ndarray]:
        """Language -> what to subtract from its raw passage vectors: its mean minus the common
        centre. The centre weighs each language by its chunks up to MIN_CHUNKS, so a handful of
        notes in a new language barely moves the others."""
        import numpy as np

        if len(self.languages) < 2:
            return {}
        # LanguageStats are frozen: the same objects under the same names give the same offsets.
        # The key holds the objects themselves (compared by identity): an id alone could be that
        # of a new object allocated where a replaced, freed one was
        key = tuple(self.languages.items())
        cached = self._offsets
        if (
            cached is not None
            and len(cached[0]) == len(key)
            and all(a == b and s is t for (a, s), (b, t) in zip(cached[0], key, strict=True))
        ):
            return cached[1]
        weights = {lang: float(min(max(s.chunks, 1), MIN_CHUNKS)) for lang, s in self.languages.items()}
        centre = sum(s.mean * weights[lang] for lang, s in self.languages.items()) / sum(weights.values())
        offsets = {lang: np.asarray(s.mean - centre, dtype=np.float32) for lang, s in self.languages.items()}
        self._offsets = (key, offsets)
        return offsets

    def neutralise(self, vectors: np.ndarray, languages: Sequence[str | None]) -> np.ndarray:
        """Raw unit vectors of chunks in `languages` -> their neutral unit vectors (a copy)."""
        return _apply(vectors, languages, self.offsets(), forward=True)

    def restore(self, vectors: np.ndarray, languages: Sequence[str | None]) -> np.ndarray:
        """Neutral unit vectors -> the raw unit vectors they came from (the exact inverse)."""
        return _apply(vectors, languages, self.offsets(), forward=False)

    def summary(self) -> str:
        """One line for status and --explain: `cs:default/3 en:index/120 ru:index/98` (origin/chunks)."""
        if len(self.languages) < 2:
            return "none (fewer than two languages)"
        return " ".join(f"{lang}:{s.origin}/{s.chunks}" for lang, s in sorted(self.languages.items()))

    def to_json(self) -> str:
        return json.dumps(
            {
                lang: {"chunks": s.chunks, "origin": s.origin, "mean": [round(float(x), 7) for x in s.mean]}
                for lang, s in sorted(self.languages.items())
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> NeutralSpace:
        import numpy as np

        if not text:
            return cls()
        raw = json.loads(text)
        return cls(
            {
                lang: LanguageStats(
                    np.asarray(item["mean"], dtype=np.float32), int(item["chunks"]), str(item["origin"])
                )
                for lang, item in raw.items()
            }
        )


def _apply(
    vectors: np.ndarray, languages: Sequence[str | None], offsets: Mapping[str, np.ndarray], *, forward: bool
) -> np.ndarray:
    import numpy as np

    out = np.array(vectors, dtype=np.float32, copy=True)
    if not offsets or not len(out):
        return out
    if forward:
        return _neutralise_rows(out, languages, offsets)
    for lang, offset in offsets.items():  # the way back, one language's rows at a time
        rows = np.fromiter((chunk_lang == lang for chunk_lang in languages), dtype=bool, count=len(languages))
        if not rows.any():
            continue
        block = out[rows]
        live = np.linalg.norm(block, axis=1) > 0  # a zero vector stays zero: it is never a hit
        unit = block[live]
        along = unit @ offset  # v = o + t n with |v| = 1: t^2 + 2 t (n.o) + |o|^2 - 1 = 0
        t = -along + np.sqrt(np.maximum(along * along - float(offset @ offset) + 1.0, 0.0))
        restored = offset + t[:, None] * unit
        norms = np.linalg.norm(restored, axis=1, keepdims=True)
        block[live] = restored / np.where(norms == 0, 1, norms)
        out[rows] = block
    return out


def _neutralise_rows(out: np.ndarray, languages: Sequence[str | None], offsets: Mapping[str, np.ndarray]) -> np.ndarray:
    """The forward step of `_apply` on every moved row at once (in place): each row's figures
    are those a pass over one language's rows at a time would give (an element-wise difference,
    a norm per row), without that pass and its copy of the rows per language."""
    import numpy as np

    order = list(offsets)
    position = {lang: i for i, lang in enumerate(order)}
    which = np.fromiter((position.get(lang, -1) for lang in languages), dtype=np.intp, count=len(languages))  # type: ignore[arg-type]
    rows = np.flatnonzero(which >= 0)
    if not rows.size:
        return out
    rows = rows[np.linalg.norm(out[rows], axis=1) > 0]  # a zero vector stays zero: it is never a hit
    shifted = out[rows] - np.stack([offsets[lang] for lang in order])[which[rows]]
    norms = np.linalg.norm(shifted, axis=1, keepdims=True)
    out[rows] = shifted / np.where(norms == 0, 1, norms)
    return out


@lru_cache(maxsize=8)
def shipped_defaults(model: str) -> dict[str, np.ndarray]:
    """Language -> mean passage vector shipped for `model`; empty when none is shipped."""
    import numpy as np

    path = DATA_DIR / f"{model}.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {lang: np.asarray(item["mean"], dtype=np.float32) for lang, item in data["languages"].items()}


def shipped_languages(model: str) -> set[str]:
    """The languages `shipped_defaults` has a mean for (read without numpy: a no-op sync asks)."""
    path = DATA_DIR / f"{model}.json"
    if not path.is_file():
        return set()
    return set(json.loads(path.read_text(encoding="utf-8"))["languages"])


def needs_estimate(space: NeutralSpace, counts: Mapping[str, int], model: str) -> bool:
    """Whether the statistics are stale under the bounded-drift rule (see the module doc)."""
    return _stale({lang: (s.chunks, s.origin) for lang, s in space.languages.items()}, counts, model)


def stored_needs_estimate(text: str | None, counts: Mapping[str, int], model: str) -> bool:
    """`needs_estimate` of the statistics stored as `text` (`to_json`), without loading numpy
    for their means: the every-minute no-op sync asks this and rarely needs more."""
    raw = json.loads(text) if text else {}
    return _stale({lang: (int(item["chunks"]), str(item["origin"])) for lang, item in raw.items()}, counts, model)


def _stale(known: Mapping[str, tuple[int, str]], counts: Mapping[str, int], model: str) -> bool:
    """The bounded-drift rule over each language's (chunks, origin) of the current statistics."""
    defaults: set[str] | None = None
    for lang, count in counts.items():
        if lang in (UNKNOWN, "", None) or count <= 0:
            continue
        stats = known.get(lang)
        if stats is None:
            if count >= MIN_CHUNKS:
                return True
            if defaults is None:
                defaults = shipped_languages(model)
            if lang in defaults:
                return True
        elif (stats[1] == DEFAULT and count >= MIN_CHUNKS) or (
            stats[1] == INDEX and count >= REESTIMATE_GROWTH * max(stats[0], 1)
        ):
            return True
    return False


def estimate(raw_means: Mapping[str, tuple[np.ndarray, int]], model: str) -> NeutralSpace:
    """New statistics from this index's raw means per language ((mean, chunks)): its own mean
    where it has MIN_CHUNKS chunks, else the shipped default, else none.

    A shipped mean comes from other text than this index's (its domain shows in the mean too),
    so a default is placed relative to the best-estimated language that also has one: its index
    mean plus the shipped difference between the two languages (measured better than the
    shipped mean itself, bench/EVAL.md)."""
    import numpy as np

    defaults = shipped_defaults(model)
    present = {
        lang: (mean, count) for lang, (mean, count) in raw_means.items() if lang not in (UNKNOWN, "") and count > 0
    }
    languages: dict[str, LanguageStats] = {
        lang: LanguageStats(np.asarray(mean, dtype=np.float32), count, INDEX)
        for lang, (mean, count) in present.items()
        if count >= MIN_CHUNKS
    }
    anchors = sorted((lang for lang in languages if lang in defaults), key=lambda lang: -languages[lang].chunks)
    for lang, (_, count) in sorted(present.items()):
        if lang in languages or lang not in defaults:
            continue
        mean = defaults[lang]
        if anchors:
            mean = languages[anchors[0]].mean + (defaults[lang] - defaults[anchors[0]])
        languages[lang] = LanguageStats(np.asarray(mean, dtype=np.float32), count, DEFAULT)
    return NeutralSpace(dict(sorted(languages.items())))


def same_offsets(a: NeutralSpace, b: NeutralSpace) -> bool:
    """Whether two sets of statistics move every vector the same way (no rewrite needed)."""
    return not moved_languages(a, b)


def moved_languages(a: NeutralSpace, b: NeutralSpace) -> set[str]:
    """The languages whose vectors two sets of statistics move differently: only their stored
    vectors need rewriting (a chunk of unknown language, or of a language whose offset stayed,
    is stored the same in both)."""
    import numpy as np

    first, second = a.offsets(), b.offsets()
    return {
        lang
        for lang in first.keys() | second.keys()
        if lang not in first or lang not in second or not np.array_equal(first[lang], second[lang])
    }


def definition(enabled: bool) -> str:
    """The identity value naming how stored vectors relate to the embedder's output: every
    constant that shapes the statistics is in it, so changing one rebuilds the vectors."""
    return f"{METHOD};min={MIN_CHUNKS};growth={REESTIMATE_GROWTH:g}" if enabled else RAW


@lru_cache(maxsize=8)
def query_basis(stats_json: str) -> np.ndarray | None:
    """Orthonormal rows spanning the directions that separate this index's own languages, or
    None with fewer than two of them.

    A query carries its language along the same directions as the passages but by another
    amount (the model's query prefix shifts it), so subtracting a passage offset over- or
    under-corrects; projecting the query off their span removes the language component
    whatever its size and needs no query statistics. Only languages estimated from this
    index count: a shipped default's direction comes from other text (measured worse)."""
    import numpy as np

    space = NeutralSpace.from_json(stats_json)
    own = sorted(lang for lang, stats in space.languages.items() if stats.origin == INDEX)
    if len(own) < 2:
        return None
    offsets = space.offsets()
    _, _, rows = np.linalg.svd(np.stack([offsets[lang] for lang in own]), full_matrices=False)
    return np.asarray(rows[: len(own) - 1], dtype=np.float32)


def project_query(vector: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """The unit query vector without its components along `basis` (query_basis)."""
    import numpy as np

    projected = vector - basis.T @ (basis @ vector)
    norm = float(np.linalg.norm(projected))
    return (projected / norm).astype(np.float32) if norm > 0 else vector
