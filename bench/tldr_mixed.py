"""A mixed-language retrieval set built from the tldr pages (English, Czech, Russian).

Each command of the set is present in the corpus in ONE language only; its questions are the
example descriptions (the `- description:` lines) of the same command in the OTHER languages,
with the command's name and every backticked span removed, so the question cannot match the
page by the command itself. Three kinds of query, recorded in each query's metadata:

- `cross`: a description in another language than the page (cs -> en, en -> cs, ru -> cs, ...);
- `same`: a description of the page in its own language (the monolingual control);
- `code`: one example's command line itself (`tar czf path/to/target.tar.gz`): a query with no
  natural language, which neutralisation must not make worse.

Commands: every Czech page with real content (alias pages are dropped in every language), split
by a hash of the name into Czech-only and English-only halves; a hash-chosen sample of the
commands with a Russian page, split the same way into Russian-only and English-only; and a
sample of English-only commands as distractors. Everything is deterministic (hashes, no RNG),
so the set is the same on every machine. Source: `../shared/eval/corpora/tldr-pages`
(pages = en, pages.cs, pages.ru).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from bench.beir import EVAL_ROOT, BeirSet

TLDR_ROOT = EVAL_ROOT / "corpora" / "tldr-pages"
FOLDERS = {"en": "pages", "cs": "pages.cs", "ru": "pages.ru"}
RU_COMMANDS = 200  # Russian commands taken (half Russian-only, half English-only)
DISTRACTORS = 600  # English-only commands with no question of their own
MAX_CROSS_PER_PAGE = 8  # per command and question language
MAX_SAME_PER_PAGE = 2
ALIAS = re.compile(r"alias of|aliasem|псевдоним", re.IGNORECASE)
DESCRIPTION = re.compile(r"^- (.+?):?\s*$")
BACKTICKED = re.compile(r"`[^`]*`")
BRACKETED_LETTER = re.compile(r"\[([^\]\s]{1,3})\]")  # tldr marks mnemonic letters: [c]reate
SHARED_PREFIX = re.compile(r"\s*\((?:\[?\w\]?)+\)")  # ru pages repeat the English mnemonic: ([c]reate)


@dataclass(frozen=True)
class Page:
    name: str
    lang: str
    text: str
    descriptions: list[str]
    command_lines: list[str]


def _stable(name: str, salt: str) -> int:
    return int(hashlib.sha256(f"{salt}:{name}".encode()).hexdigest()[:12], 16)


def read_pages(lang: str, root: Path = TLDR_ROOT) -> dict[str, Page]:
    """Command name -> its page (the `common` platform wins, then platforms by name); alias
    pages ("this command is an alias of ...") are left out."""
    pages: dict[str, Page] = {}
    folder = root / FOLDERS[lang]
    platforms = sorted(p.name for p in folder.iterdir() if p.is_dir())
    platforms.sort(key=lambda p: p != "common")
    for platform in platforms:
        for path in sorted((folder / platform).glob("*.md")):
            name = path.stem
            if name in pages:
                continue
            text = path.read_text(encoding="utf-8")
            summary = " ".join(line for line in text.splitlines() if line.startswith(">"))
            if ALIAS.search(summary):
                continue
            descriptions = [m.group(1) for line in text.splitlines() if (m := DESCRIPTION.match(line))]
            lines = [line.strip("`") for line in text.splitlines() if line.startswith("`") and line.endswith("`")]
            if descriptions:
                pages[name] = Page(name, lang, text, descriptions, lines)
    return pages


def question(description: str, command: str) -> str:
    """A description as a question: no backticked span, no mnemonic brackets, no command name."""
    text = BACKTICKED.sub(" ", description)
    text = SHARED_PREFIX.sub("", text)
    text = BRACKETED_LETTER.sub(r"\1", text)
    parts = {command, *re.split(r"[-_.]", command)}
    for part in sorted((p for p in parts if len(p) >= 2), key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(part)}(?![\w-])", " ", text, flags=re.IGNORECASE)
    return " ".join(text.split()).strip(" :,.")


def code_query(line: str) -> str:
    """A command line with its placeholders unwrapped: `tar czf {{path/to/x}}` -> `tar czf path/to/x`."""
    return " ".join(line.replace("{{", "").replace("}}", "").split())


def build(root: Path = TLDR_ROOT) -> BeirSet:
    """The set as BEIR data; query metadata lives in `query_meta` (see `build_with_meta`)."""
    return build_with_meta(root)[0]


def build_with_meta(root: Path = TLDR_ROOT) -> tuple[BeirSet, dict[str, dict[str, str]]]:
    """(the set, query id -> {"lang", "doc_lang", "kind"})."""
    by_lang = {lang: read_pages(lang, root) for lang in FOLDERS}
    en, cs, ru = by_lang["en"], by_lang["cs"], by_lang["ru"]
    placed: dict[str, str] = {}  # command -> the one language its page has in the corpus
    for name in cs:
        if name in en:
            placed[name] = "cs" if _stable(name, "cs") % 2 else "en"
    ru_candidates = sorted((n for n in ru if n in en and n not in placed), key=lambda n: _stable(n, "ru-pick"))
    for name in ru_candidates[:RU_COMMANDS]:
        placed[name] = "ru" if _stable(name, "ru") % 2 else "en"
    judged = dict(placed)
    others = sorted(
        (n for n in en if n not in placed and n not in ru and n not in cs), key=lambda n: _stable(n, "pick")
    )
    for name in others[:DISTRACTORS]:
        placed[name] = "en"

    corpus: dict[str, tuple[str, str]] = {}
    for name, lang in sorted(placed.items()):
        corpus[f"{lang}-{name}"] = ("", by_lang[lang][name].text)
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    meta: dict[str, dict[str, str]] = {}

    def add(qid: str, text: str, doc: str, lang: str, doc_lang: str, kind: str) -> None:
        if len(text.split()) < 2 and kind != "code":
            return
        queries[qid] = text
        qrels[qid] = {doc: 1}
        meta[qid] = {"lang": lang, "doc_lang": doc_lang, "kind": kind}

    for name, doc_lang in sorted(judged.items()):
        doc = f"{doc_lang}-{name}"
        page = by_lang[doc_lang][name]
        for lang, pages in by_lang.items():
            other = pages.get(name)
            if other is None:
                continue
            if lang == doc_lang:
                for i, description in enumerate(other.descriptions[:MAX_SAME_PER_PAGE]):
                    add(f"{name}:same:{lang}:{i}", question(description, name), doc, lang, doc_lang, "same")
            else:
                for i, description in enumerate(other.descriptions[:MAX_CROSS_PER_PAGE]):
                    add(f"{name}:cross:{lang}:{i}", question(description, name), doc, lang, doc_lang, "cross")
        if page.command_lines:
            add(f"{name}:code:0", code_query(page.command_lines[0]), doc, "none", doc_lang, "code")
    return BeirSet("tldr-mixed", corpus, queries, qrels), meta
