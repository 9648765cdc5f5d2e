"""Language of chunks and queries: prose extraction, detection, and the honest "unknown"."""

from __future__ import annotations

import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer import language
from indexer.langid_tables import library_identifier
from indexer.language import (
    SUPPORTED_LANGUAGES,
    UNKNOWN,
    chunk_language,
    detect_language,
    detect_query_language,
    prose_for_language,
    prose_is_cyrillic,
)

CZECH = (
    "Zálohu databáze spouštíme každou noc ve dvě hodiny. Skript vytvoří komprimovaný soubor a uloží "
    "ho na vzdálený server. Když záloha selže, správce dostane e-mail s popisem chyby. Před obnovou "
    "je potřeba zastavit aplikaci, aby do databáze nikdo nezapisoval, a potom ověřit, že obnovená "
    "kopie je úplná a že se k ní aplikace umí připojit."
)
SLOVAK = (
    "Zálohovanie databázy robíme každú noc. Skript sa spustí o druhej hodine ráno, vytvorí "
    "komprimovaný súbor a uloží ho na vzdialený server. Ak sa záloha nepodarí, správca dostane "
    "e-mail s popisom chyby. Pred obnovením zálohy je potrebné zastaviť aplikáciu, aby do databázy "
    "nikto nezapisoval, a potom skontrolovať, či je obnovená kópia úplná."
)
ENGLISH = (
    "The database is backed up every night at two o'clock. The script writes a compressed file and "
    "copies it to a remote server. When the backup fails, the administrator gets an email with the "
    "error. Before a restore, stop the application so that nobody writes to the database, then check "
    "that the restored copy is complete and that the application can connect to it."
)
RUSSIAN = (
    "Резервную копию базы данных мы делаем каждую ночь в два часа. Скрипт создаёт сжатый файл и "
    "копирует его на удалённый сервер. Если копирование не удалось, администратор получает письмо с "
    "описанием ошибки. Перед восстановлением нужно остановить приложение, чтобы никто не записывал "
    "данные, а потом проверить, что восстановленная копия полная."
)
UKRAINIAN = (
    "Резервну копію бази даних ми робимо щоночі. Скрипт запускається о другій годині ночі, створює "
    "стиснений файл і зберігає його на віддаленому сервері. Якщо копіювання не вдалося, адміністратор "
    "отримує лист з описом помилки."
)
GERMAN = (
    "Die Datenbank wird jede Nacht gesichert. Das Skript erstellt eine komprimierte Datei und legt sie "
    "auf einem entfernten Server ab. Schlägt die Sicherung fehl, bekommt der Administrator eine E-Mail."
)
POLISH = (
    "Kopię zapasową bazy danych robimy każdej nocy. Skrypt tworzy skompresowany plik i zapisuje go na "
    "zdalnym serwerze. Jeśli kopia się nie uda, administrator dostaje wiadomość z opisem błędu."
)

CODE_BLOCK = """```bash
# create the archive and copy it to the backup server, then verify the checksum
tar czf /tmp/backup.tar.gz /var/lib/postgresql/data --exclude='*.tmp'
rsync -avz --progress /tmp/backup.tar.gz backup@server.example.com:/srv/backups/
sha256sum /tmp/backup.tar.gz | tee /tmp/backup.sha256
```"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [(CZECH, "cs"), (ENGLISH, "en"), (RUSSIAN, "ru"), (SLOVAK, "sk"), (UKRAINIAN, "uk"), (GERMAN, "de")],
)
def test_prose_chunks_get_their_language(text: str, expected: str) -> None:
    assert chunk_language(f"## Záloha\n\n{text}\n") == expected


def test_czech_and_slovak_are_told_apart() -> None:
    # short texts where n-grams alone waver: the letters only one of the two languages has decide
    assert detect_language("Obnova zálohy přes vzdálený přístup") == "cs"
    assert detect_language("Obnova zálohy cez vzdialený prístup, ľahko") == "sk"
    assert chunk_language(CZECH) != "sk" and chunk_language(SLOVAK) != "cs"


def test_code_and_tables_do_not_decide_the_language_of_prose() -> None:
    # much more English (code comments, commands, a table) than Czech, yet the prose is Czech
    table = "| option | meaning |\n|---|---|\n| --verbose | print every file that is written |\n| --exclude | skip the files matching the pattern |"
    chunk = f"## Záloha\n\n{CODE_BLOCK}\n\n{CZECH[:160]}\n\n{table}\n\n    indented code with english words inside it\n"
    assert chunk_language(chunk) == "cs"


@pytest.mark.parametrize(
    "chunk",
    [
        "",
        "   \n\n",
        CODE_BLOCK,
        "| host | port | proto |\n|---|---|---|\n| db01 | 5432 | tcp |\n| vpn | 51820 | udp |",
        "    systemctl restart nginx\n    journalctl -u nginx --since today\n",
        "https://example.com/a/b/c <https://example.org> ![](img/a.png) `kubectl get pods -A`",
        "10.0.0.1 10.0.0.2 192.168.1.1 v1.2.3 2024-01-01",
    ],
    ids=["empty", "blank", "code-only", "table-only", "indented-code", "links-only", "numbers"],
)
def test_chunks_without_prose_are_unknown(chunk: str) -> None:
    assert chunk_language(chunk) == UNKNOWN


def test_mixed_text_is_unknown() -> None:
    assert detect_language(f"{CZECH} {ENGLISH}") == UNKNOWN  # two halves, two languages
    assert detect_language(f"{RUSSIAN} {ENGLISH}") == UNKNOWN  # two scripts
    assert detect_language(f"{ENGLISH} {RUSSIAN[:120]}") == UNKNOWN


def test_languages_outside_the_supported_set_are_unknown_not_a_neighbour() -> None:
    assert detect_language(POLISH) == UNKNOWN
    assert (
        detect_language("Comment restaurer la sauvegarde de la base de données après une panne du serveur") == UNKNOWN
    )


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Ctrl+Shift+I", UNKNOWN),
        ("lvconvert --merge", UNKNOWN),
        ("51820/udp", UNKNOWN),
        ("PROJ-123", UNKNOWN),
        ("zálohování", UNKNOWN),  # one word: no guess
        ("nginx", UNKNOWN),
        ("jak obnovit zálohu databáze", "cs"),
        ("как восстановить базу", "ru"),
        ("how to restore the database", "en"),
        ("backup OR NOT", UNKNOWN),  # operators are not words of a language: one word left
    ],
)
def test_query_language(query: str, expected: str) -> None:
    assert detect_query_language(query) == expected


def test_prose_for_language_keeps_prose_and_drops_the_rest() -> None:
    text = (
        "---\ntitle: Obnova serveru\ntags: [db]\n---\n"
        "# Postup\n\nText s `inline_kodem` a [odkazem na návod](https://example.com/navod) "
        "a <https://a.example/b>, www.example.cz/x a mail admin@example.cz.\n\n"
        f"{CODE_BLOCK}\n\n~~~\nfenced with tildes\n~~~\n\n"
        "| a | b |\n|---|---|\n| c | d |\n\n[ref]: https://example.com/ref\n"
        '<div class="note">poznámka</div> <!-- komentář -->\n'
    )
    prose = prose_for_language(text)
    for kept in ("Obnova serveru", "Postup", "Text s", "odkazem na návod", "poznámka"):
        assert kept in prose
    for dropped in (
        "title",
        "inline_kodem",
        "https",
        "www",
        "admin@",
        "tar czf",
        "tildes",
        "| a |",
        "ref]",
        "div",
        "komentář",
    ):
        assert dropped not in prose


def test_an_unclosed_fence_hides_the_rest_and_list_continuations_stay() -> None:
    assert prose_for_language("Úvod.\n\n```\ncode\nmore code").strip() == "Úvod."
    assert "pokračování" in prose_for_language("- položka\n    pokračování položky\n")


def test_threads_share_one_model_and_agree() -> None:
    language._identifier_instance = None  # first use from many threads at once
    texts = [CZECH, ENGLISH, RUSSIAN, SLOVAK] * 4
    results: list[tuple[int, str]] = []
    lock = threading.Lock()

    def work(i: int, text: str) -> None:
        found = detect_language(text)
        with lock:
            results.append((i, found))

    threads = [threading.Thread(target=work, args=(i, t)) for i, t in enumerate(texts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [(i, detect_language(t)) for i, t in enumerate(texts)]
    assert language._identifier_instance is language._identifier()


ANSWERS = set(SUPPORTED_LANGUAGES) | {UNKNOWN}


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_detection_never_raises_and_answers_a_supported_code_or_unknown(text: str) -> None:
    assert detect_language(text) in ANSWERS
    assert chunk_language(text) in ANSWERS
    assert detect_query_language(text) in ANSWERS


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["záloha", "server", "`code`", "| a | b |", "```", "\n", "база", "http://x.y/z", "<b>", "    x"]
        ),
        max_size=40,
    )
)
def test_markdown_fragments_never_raise(parts: list[str]) -> None:
    assert chunk_language(" ".join(parts)) in ANSWERS


# ---- many chunks in one pass -----------------------------------------------------------------

ENGLISH_SECTION = "## Upstream notes\n\n" + ENGLISH
MIXED_BATCH = [
    f"## Záloha\n\n{CZECH}\n",
    ENGLISH_SECTION,
    f"## Копия\n\n{RUSSIAN}\n",
    SLOVAK,
    UKRAINIAN,
    GERMAN,
    POLISH,
    CODE_BLOCK,
    "",
    "| host | port |\n|---|---|\n| db01 | 5432 |",
    f"{CZECH} {ENGLISH}",
    f"{RUSSIAN} {ENGLISH}",
    "jak obnovit zálohu",
    "Obnova zálohy cez vzdialený prístup, ľahko",
    f"## Záloha\n\n{CODE_BLOCK}\n\n{CZECH[:160]}\n",
    (CZECH + " ") * 12,  # long: both ends read
]


def test_a_batch_gets_the_labels_each_chunk_gets_alone() -> None:
    alone = [chunk_language(text) for text in MIXED_BATCH]
    assert alone[:7] == ["cs", "en", "ru", "sk", "uk", "de", UNKNOWN]
    assert alone[7:12] == [UNKNOWN] * 5  # code, nothing, a table, two mixed texts
    assert language.chunk_languages(MIXED_BATCH) == alone
    # a chunk's label does not depend on its neighbours in the batch
    assert language.chunk_languages(MIXED_BATCH[::-1] * 3) == alone[::-1] * 3
    assert language.chunk_languages([]) == []
    assert language.detect_languages(MIXED_BATCH) == [detect_language(text) for text in MIXED_BATCH]


def test_the_write_batch_detects_new_chunks_together_and_others_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    batches: list[list[str]] = []
    real = language.chunk_languages

    def counting(texts: list[str]) -> list[str]:
        batches.append(texts)
        return real(texts)

    monkeypatch.setattr(language, "chunk_languages", counting)
    language_of = language.chunk_language_of(MIXED_BATCH[:3])
    assert batches == []  # nothing asked yet: nothing detected
    assert language_of(ENGLISH_SECTION) == "en"
    assert language_of(MIXED_BATCH[0]) == "cs" and language_of(MIXED_BATCH[2]) == "ru"
    assert batches == [MIXED_BATCH[:3]]  # one pass for all three
    assert language_of(GERMAN) == "de"  # not in the batch: detected alone
    assert len(batches) == 1


def test_what_a_label_decides_alone_is_what_decide_says() -> None:
    samples = [text[:64] for text in MIXED_BATCH if text] + ["jak obnovit zálohu", "zxq wvk", "a b", "Das ist gut"]
    outcomes, labels, tops, czechs = language._identifier().best(samples)
    for sample, outcome, label, top, czech in zip(samples, outcomes, labels, tops, czechs, strict=True):
        if label in ("cs", "sk"):
            assert outcome is None  # their letters decide too
        else:
            assert outcome == language._decide(label, top, czech, sample)


def test_a_write_batch_detects_each_distinct_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[str]] = []
    real = language.chunk_languages
    monkeypatch.setattr(language, "chunk_languages", lambda texts: asked.append(texts) or real(texts))
    texts = [MIXED_BATCH[0], "", MIXED_BATCH[2], MIXED_BATCH[0], ""]
    language_of = language.chunk_language_of(texts)
    assert [language_of(text) for text in texts] == ["cs", UNKNOWN, "ru", "cs", UNKNOWN]
    assert asked == [[MIXED_BATCH[0], "", MIXED_BATCH[2]]]


def _scorer_states(data: bytes) -> tuple[list[int], list[int]]:
    scorer = language._identifier()
    return scorer._walk_loop(data), scorer._walk_segments(data).tolist()


def test_the_automaton_walked_in_segments_reaches_the_states_of_the_byte_loop() -> None:
    texts = [CZECH, RUSSIAN * 3, ENGLISH + UKRAINIAN, "a", "ab" * 300, "\u0000\u00ff" + SLOVAK]
    data = language._SEPARATOR.join(language._model_bytes(text) for text in texts)
    loop, segments = _scorer_states(data)
    assert loop == segments
    for size in (1, 5, 6, 7, 17, 300, 1021):
        loop, segments = _scorer_states(data[:size])
        assert loop == segments


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000))
def test_any_bytes_walk_the_same_in_segments(data: bytes) -> None:
    loop, segments = _scorer_states(data)
    assert loop == segments


def test_the_separator_restarts_the_automaton_which_remembers_at_most_its_depth() -> None:
    import numpy as np

    scorer = language._identifier()
    table = scorer._next_array.reshape(-1, 256)  # states share stored rows of 256 next states
    rows = scorer._rows_array >> 8
    assert (table[rows, language._SEPARATOR[0]] == 0).all() and scorer._output[0] < 0
    # breadth first from the start: every state is reached within the depth the segments rely on
    seen = np.zeros(len(rows), dtype=bool)
    seen[0] = True
    frontier = np.array([0])
    for _ in range(language._AUTOMATON_DEPTH):
        reached = np.zeros(len(rows), dtype=bool)
        reached[table[rows[frontier]].ravel()] = True
        frontier = np.flatnonzero(reached & ~seen)
        seen |= reached
    assert seen.all()
    # and a state stands for its last bytes: from any state, the depth's bytes lead to one state
    rng = np.random.default_rng(10)
    starts = rng.integers(0, len(rows), size=500)
    for tail in rng.integers(0, 256, size=(50, language._AUTOMATON_DEPTH)):
        states = starts
        for byte in tail.tolist():
            states = table[rows[states], byte]
        assert len(set(states.tolist())) == 1


def test_the_scores_are_py3langids_own() -> None:
    scorer = language._identifier()
    identifier = library_identifier(language.CANDIDATE_LANGUAGES)
    samples = ["jak obnovit zálohu databáze", ENGLISH[:64], RUSSIAN[:64], SLOVAK[:64], "zxq", "1234"]
    ours = scorer.probabilities(samples)
    for sample, row in zip(samples, ours, strict=True):
        library = dict(identifier.rank(sample))
        assert {label: round(value, 5) for label, value in zip(scorer.labels, row, strict=True)} == {
            label: round(library[label], 5) for label in scorer.labels
        }


def test_one_short_sample_scores_the_bits_it_scores_in_a_batch() -> None:
    scorer = language._identifier()
    samples = ["jak obnovit zálohu databáze", ENGLISH[:64], RUSSIAN[:64], SLOVAK[:64], "zxq"]
    batch = scorer.probabilities(samples)
    for sample, row in zip(samples, batch, strict=True):
        assert scorer.probabilities([sample]).tobytes() == row.reshape(1, -1).tobytes()


# ---- the cheaper steps read the same words and windows as the plain definitions ---------------

WORD_PIECES = [
    "záloha",
    "Don't",
    "česko-slovenský",
    "'quoted'",
    "(paren)",
    "«ёлка»",
    "x²",
    "½",
    "abc'-def",
    "foo_bar",
    "PROJ-123",
    "--merge",
    "a.b",
    "…",
    "_under_",
    "’tis",
    "",
    " ",
    "\t",
    "\n",
    "\u00a0",
    "\u2003",
    "\x1c",
    "\x85",
    "Ctrl+Shift+I",
    "ǅ",
    "ﬁ",
    "٣",
    "ⅷ",
    "Ⅻ",
    "'",
    "-",
    "—",
    "#tag",
    "**bold**",
    "~x~",
]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(WORD_PIECES) | st.text(max_size=6), max_size=30))
def test_language_words_is_the_word_token_pattern(parts: list[str]) -> None:
    text = "".join(parts)
    assert language.language_words(text) == language._WORD_TOKEN.findall(text)


def _leading_words(words: list[str]) -> list[str]:
    """The window as first defined: words from the start while fewer than WINDOW_CHARS were read."""
    size = 0
    for count, word in enumerate(words):
        if size >= language.WINDOW_CHARS:
            return words[:count]
        size += len(word) + 1
    return words


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet="abcčřжы", min_size=1, max_size=14), min_size=2, max_size=40))
def test_the_windows_are_the_words_up_to_window_chars_from_each_end(words: list[str]) -> None:
    plan = language._samples(words, [])
    if plan is None:
        return
    sample = " ".join(words)
    if len(sample) <= 2 * language.WINDOW_CHARS:
        assert plan == ([sample], sample)
    else:
        head, tail = " ".join(_leading_words(words)), " ".join(_leading_words(words[::-1])[::-1])
        assert plan == ([head, tail], sample)


MARKDOWN_LINES = [
    ENGLISH[:90],
    CZECH[:120],
    RUSSIAN[:100],
    ENGLISH,
    CZECH,
    "",
    "   ",
    " \t ",
    "\t",
    "    indented code line",
    "\tcode after a tab",
    "    - a nested list item",
    "    12) numbered continuation",
    "- list item",
    "1. first",
    "| a | b |",
    "|---|:-:|",
    "[ref]: http://example.com/x",
    "`inline` and ``two`` spans",
    "see [a link](http://x.y)",
    "www.example.cz and http://a.b/c",
    "WWW.EXAMPLE.CZ,slovo and Www.Example.cz",
    "mail me@example.com now",
    "<b>tag</b>",
    "---",
    "***",
    "# Heading",
    "> quoted prose",
    "    ",
    "a line ending in spaces    ",
    "```",
    "```bash",
    "  ~~~",
    "````",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(MARKDOWN_LINES), min_size=1, max_size=40), st.booleans())
def test_a_long_chunk_read_at_its_two_ends_plans_as_its_whole_prose(lines: list[str], newline: bool) -> None:
    text = "\n".join(lines) + ("\n" if newline else "")
    assert language._chunk_samples(text) == language._text_samples(prose_for_language(text))


def test_the_two_ends_are_read_alone_when_they_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    chunk = "\n\n".join([f"## Záloha\n\n{CZECH}", "    indented code\n    more code", ENGLISH[:120], CZECH])
    read: list[int] = []
    lines_prose = language._prose_of_lines
    monkeypatch.setattr(language, "_prose_of_lines", lambda text: read.append(len(text)) or lines_prose(text))
    assert language._chunk_samples(chunk) == language._text_samples(prose_for_language(chunk))
    assert len(read) == 3 and read[0] + read[1] < len(chunk)  # both ends, then the whole for reference
    assert chunk_language(chunk) == "cs"


# ---- the cheap tests before each step and the line-wise fence pattern change nothing ----------

PROSE_PIECES = [
    *MARKDOWN_LINES,
    "]",
    "[a]",
    "[a][b]",
    "[a]: x",
    "](",
    "<",
    "<!--",
    "-->",
    "<!-- note -->",
    "<i>",
    "`",
    "``",
    "~",
    "~~~",
    "/",
    "://",
    "w",
    "WWW.",
    "www.",
    "@",
    "a@b.cz",
    "|",
    "\n",
    "\n\n",
    "    ",
    "\t",
]


def _every_step(text: str) -> str:
    """`_prose_of_lines` with every step run whatever the text holds."""
    steps: list[tuple[re.Pattern[str], str]] = [
        (language._INDENTED_CODE, ""),
        (language._TABLE_ROW, ""),
        (language._REFERENCE_DEF, ""),
        (language._HTML_COMMENT, " "),
        (language._INLINE_CODE, " "),
        (language._IMAGE_OR_LINK, r"\1"),
        (language._REFERENCE_LINK, r"\1"),
        (language._URL, " "),
        (language._HTML_TAG, " "),
        (language._EMAIL, " "),
    ]
    for pattern, replacement in steps:
        text = pattern.sub(replacement, text)
    return text


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(PROSE_PIECES) | st.text(alphabet="aw.:/<>!-[]()`|@ \t\n", max_size=8), max_size=30))
def test_a_step_skipped_by_its_cheap_test_would_have_changed_nothing(parts: list[str]) -> None:
    text = "".join(parts)
    assert language._prose_of_lines(text) == _every_step(text)


# the fence pattern as first written: its body taken a character at a time
_FENCE_BY_CHARACTERS = re.compile(
    r"^ {0,3}(`{3,}|~{3,})[^\n]*(?:\n.*?)??(?:\n {0,3}\1[`~]*[ \t]*(?=\n|\Z)|\Z)", re.M | re.S
)
FENCE_PIECES = [
    "```",
    "~~~",
    "````",
    "``",
    "`",
    "~",
    "   ```",
    "    ```",
    "``` x",
    "~~~~ y",
    "```~",
    "~~~`",
    "text",
    " ",
    "\t",
]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(FENCE_PIECES), st.sampled_from(["\n", "", " ", "\n\n"])), max_size=16))
def test_the_fence_pattern_taken_by_lines_removes_what_it_did_by_characters(parts: list[tuple[str, str]]) -> None:
    text = "".join(piece + gap for piece, gap in parts)
    assert language._FENCED_CODE.sub("", text) == _FENCE_BY_CHARACTERS.sub("", text)
    # and run from the first line that holds three backticks or tildes on
    prose = "Úvod a `kód` ~ tilda\n"
    assert language._without_fences(prose + text) == _FENCE_BY_CHARACTERS.sub("", prose + text)


RUSSIAN_WITH_COMMANDS = (
    "# Сброс пароля root в MySQL\n\nПоднимаем второй экземпляр mysqld с опцией skip-grant-tables, копируем"
    " файлы таблицы user из исходной базы mysql и посылаем SIGHUP нашему mysqld, чтобы он перечитал grant.\n\n"
    "```\nmysql_install_db --datadir=/dbdata/datadir/ --user=mysql\n```\n"
)


def test_the_script_of_a_chunks_prose_is_told_where_its_language_is_not() -> None:
    # Russian prose whose names and options are in Latin letters: too mixed to be named
    assert chunk_language(RUSSIAN_WITH_COMMANDS) == UNKNOWN
    assert prose_is_cyrillic(RUSSIAN_WITH_COMMANDS) is True
    assert prose_is_cyrillic("Пароль root сбрасываем так: mysqld --skip-grant-tables") is True
    assert prose_is_cyrillic("How to restore the backup with restic restore latest.") is False
    assert prose_is_cyrillic("Obnova zálohy z disku: restic restore latest.") is False
    # an English sentence quoting one Russian word is Latin-script prose
    assert prose_is_cyrillic("The note says пароль where the password goes, then restic restore latest.") is False
    # too few words to tell: code alone, a bare heading
    assert prose_is_cyrillic("```\nls -la\n```") is None
    assert prose_is_cyrillic("# Prime_number\n\n") is None
    # past the length whose answers are kept, the same answer, read each time
    assert len(RUSSIAN_WITH_COMMANDS * 30) > language.CACHED_TEXT_CHARS
    assert prose_is_cyrillic(RUSSIAN_WITH_COMMANDS * 30) is True
