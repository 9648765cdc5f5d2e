"""The seeded synthetic corpus: note paths, texts in three languages, queries and clustered
vectors, identical on every machine for one GEN_VERSION."""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

GEN_VERSION = "1"  # bump when the corpus generator's output changes
# sha256 of note_text(0..199) and queries(50) at GEN_VERSION "1": every dense figure in RESULTS.md
# was measured on exactly this output, and the caches are keyed by the version alone
GEN_DIGEST = "9d62edb3ab72e711b0579a4e8e778fbcccdbcd3f3025c87a548d2147d3a5abd1"
SEED = 20240611
DIMS = 384
AREAS = 100  # top-level folders: one area holds ~1 % of the corpus (the scoped-query target)
TOPICS_PER_AREA = 5
SECTION_LO, SECTION_HI = 80, 100  # "words" per H2/H3 section body (estimate; tuned for ~200-300-token chunks)
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


Draw = Callable[[random.Random, int], list[str]]  # n words of one language for one note


class WordSource(Protocol):
    """Where a note's words come from: `draw(lang, topic, note)` returns the sampler the
    generator calls for every sentence, title, heading and table cell in that language."""

    def draw(self, lang: str, topic: int, note: int) -> Draw: ...


class DenseWords:
    """GEN_VERSION 1's words: ~150 per language, each topic with its own order of frequency."""

    def draw(self, lang: str, topic: int, note: int) -> Draw:
        words = _topic_words(topic, lang, _WORDS[lang])
        cum = _CUM[lang]
        return lambda rng, n: rng.choices(words, cum_weights=cum, k=n)


_WORDS = {name: words for name, words, _ in LANGS}
DENSE = DenseWords()


def _lang(rng: random.Random, bias: str) -> str:
    # a note has a main language (70 %) and mixes in the others
    if rng.random() < 0.7:
        return bias
    r = rng.random()
    acc = 0.0
    for name, _, share in LANGS:
        acc += share
        if r < acc:
            return name
    return LANGS[0][0]


def _sentence(rng: random.Random, draw: Draw) -> str:
    ws = draw(rng, rng.randint(6, 16))
    r = rng.random()
    if r < 0.12:
        ws.insert(rng.randrange(len(ws)), rng.choice(HOSTS))
    elif r < 0.2:
        ws.insert(rng.randrange(len(ws)), f"10.{rng.randint(0, 9)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}")
    elif r < 0.28:
        ws.insert(rng.randrange(len(ws)), f"v{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}")
    elif r < 0.34:
        ws.insert(
            rng.randrange(len(ws)), f"`{rng.choice(['systemctl', 'restic', 'pg_dump', 'rsync', 'kubectl', 'git'])}`"
        )
    text = " ".join(ws)
    return text[0].upper() + text[1:] + rng.choice([".", ".", ".", "!", "?", ":"]) if text else text


def _paragraph(rng: random.Random, draw: Draw, sentences: int) -> str:
    return " ".join(_sentence(rng, draw) for _ in range(sentences))


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
            f'    ports: ["{rng.randint(3000, 9999)}:80"]',
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


def _table(rng: random.Random, draw: Draw) -> list[str]:
    cols = draw(rng, 3)
    rows = [f"| {' | '.join(cols)} |", "|---|---|---|"]
    for _ in range(rng.randint(2, 4)):
        rows.append(f"| {' | '.join(draw(rng, 2))} | {rng.randint(1, 9999)} | {rng.choice(HOSTS)} |")
    return rows


def _section_body(
    rng: random.Random, bias: str, topic: int, target_words: int, source: WordSource, note: int
) -> list[str]:
    out: list[str] = []
    written = 0
    while written < target_words:
        draw = source.draw(_lang(rng, bias), topic, note)
        r = rng.random()
        if r < 0.12 and out:
            out += _code_block(rng)
            written += 25
        elif r < 0.22:
            n = rng.randint(3, 6)
            out += [f"- {_sentence(rng, draw)}" for _ in range(n)]
            written += n * 11
        elif r < 0.26:
            out += _table(rng, draw)
            written += 20
        else:
            sentences = rng.randint(2, 5)
            out.append(_paragraph(rng, draw, sentences))
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


def note_text(i: int, source: WordSource = DENSE) -> str:
    """One markdown note, a pure function of (SEED, i): front matter, H1 title, H2/H3 sections
    of ~80-100 words each (median chunk ~280 tokens by chars/4, breadcrumb included), paragraphs, lists, code, tables."""
    rng = random.Random(SEED * 1_000_003 + i)
    topic = note_topic(note_path(i))
    bias = rng.choices(["en", "cs", "ru"], weights=[0.45, 0.33, 0.22])[0]
    main = source.draw(bias, topic, i)
    title_words = main(rng, rng.randint(2, 5))
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
    lines += _section_body(rng, bias, topic, rng.randint(15, 50), source, i)
    for _ in range(rng.randint(2, 6)):
        lines.append(f"## {' '.join(main(rng, rng.randint(1, 4))).capitalize()}")
        lines.append("")
        lines += _section_body(rng, bias, topic, rng.randint(SECTION_LO, SECTION_HI), source, i)
        for _ in range(rng.choice([0, 0, 1, 2])):
            lines.append(f"### {' '.join(main(rng, rng.randint(1, 3))).capitalize()}")
            lines.append("")
            lines += _section_body(rng, bias, topic, rng.randint(SECTION_LO, SECTION_HI), source, i)
    return "\n".join(lines).rstrip() + "\n"


def check_generator() -> None:
    """Refuse to build a cache from a generator whose output changed under the same GEN_VERSION:
    its figures would be compared with older ones measured on other text."""
    h = hashlib.sha256()
    for i in range(200):
        h.update(note_text(i).encode())
    h.update("\n".join(queries(50)).encode())
    if h.hexdigest() != GEN_DIGEST:
        raise RuntimeError(
            f"bench/corpus_text.py's output changed but GEN_VERSION is still {GEN_VERSION!r}: "
            "bump GEN_VERSION and record the new output's GEN_DIGEST"
        )


def note_mtime(i: int) -> float:
    return 1_700_000_000.0 + i * 97.0


def queries(n: int = 50) -> list[str]:
    """Varied, deterministic queries: single words and stems in each language, mixed phrases,
    hostnames/IPs/versions, quoted phrases and natural-language questions with stopwords."""
    rng = random.Random(SEED + 7)
    templates: list[Callable[[], str]] = [
        lambda: rng.choice(EN[:60]),
        lambda: rng.choice(CS[:60]),
        lambda: rng.choice(RU[:60]),
        lambda: rng.choice(CS)[:5],  # a stem: prefix search "záloh*"
        lambda: " ".join(rng.sample(EN, 2)),
        lambda: " ".join(rng.sample(CS, 3)),
        lambda: " ".join(rng.sample(RU, 2)),
        lambda: f"{rng.choice(EN)} {rng.choice(CS)} {rng.choice(RU)}",
        lambda: rng.choice(HOSTS),
        lambda: f'"{" ".join(rng.sample(EN[:40], 2))}"',
        lambda: f"how do I {rng.choice(EN)} the {rng.choice(EN)} on {rng.choice(HOSTS)}",
        lambda: f"jak nastavit {rng.choice(CS)} pro {rng.choice(CS)}",
        lambda: f"как настроить {rng.choice(RU)} для {rng.choice(RU)}",
        lambda: f"10.{rng.randint(0, 9)}.{rng.randint(0, 255)}",
        lambda: " ".join(rng.sample(EN + CS + RU, 6)),
        lambda: rng.choice(["restic snapshots", "pg_dump", "systemctl status", "kubectl rollout", "v2.3"]),
    ]
    return distinct_queries(templates, n)


TEMPLATE_TRIES = 200  # draws of one template before it counts as used up


def distinct_queries(templates: list[Callable[[], str]], n: int) -> list[str]:
    """`n` different queries, the templates taking turns; a template that keeps drawing queries
    already made (one of five fixed commands, say) yields its turn to the next, so any `n` ends."""
    out: list[str] = []
    seen: set[str] = set()
    skipped = 0
    while len(out) < n:
        template = templates[(len(out) + skipped) % len(templates)]
        for _ in range(TEMPLATE_TRIES):
            q = template()
            if q not in seen:
                seen.add(q)
                out.append(q)
                break
        else:
            skipped += 1
            if skipped > n * len(templates):
                raise ValueError(f"the templates make fewer than {n} different queries")
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
