"""The tldr-mixed set builder and the cross-lingual benchmark's split scoring, on a tiny tree."""

from __future__ import annotations

from pathlib import Path

import pytest

import bench.tldr_mixed as tldr_mixed
from bench.beir import BeirRun
from bench.crosslingual import split_scores
from bench.tldr_mixed import build_with_meta, parallel_descriptions, question

PAGES = {
    "en": {
        "tar": "# tar\n\n> Archiving utility.\n\n- Create an archive from [f]iles with `tar`:\n\n`tar cf {{target.tar}} {{file}}`\n\n- Extract an archive into the current directory:\n\n`tar xf {{source.tar}}`\n",
        "grep": '# grep\n\n> Find patterns in files.\n\n- Search for a pattern in a file:\n\n`grep "{{pattern}}" {{path}}`\n',
        "gtar": "# gtar\n\n> This command is an alias of GNU `tar`.\n\n- View documentation for the original command:\n\n`tldr tar`\n",
    },
    "cs": {
        "tar": "# tar\n\n> Archivovací nástroj.\n\n- Vytvořit archiv ze souborů pomocí příkazu tar:\n\n`tar cf {{cil.tar}} {{soubor}}`\n\n- Rozbalit archiv do aktuálního adresáře:\n\n`tar xf {{zdroj.tar}}`\n",
    },
    "ru": {
        "grep": '# grep\n\n> Поиск шаблонов в файлах.\n\n- Найти шаблон в файле:\n\n`grep "{{шаблон}}" {{путь}}`\n',
    },
}
FOLDERS = {"en": "pages", "cs": "pages.cs", "ru": "pages.ru"}


def tldr_tree(root: Path) -> Path:
    for lang, pages in PAGES.items():
        for name, text in pages.items():
            path = root / FOLDERS[lang] / "common" / f"{name}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return root


def test_question_drops_the_command_name_backticks_and_mnemonic_brackets() -> None:
    assert question("Create an archive from [f]iles with `tar cf`", "tar") == "Create an archive from files with"
    assert question("Vytvořit archiv pomocí příkazu tar:", "tar") == "Vytvořit archiv pomocí příkazu"
    assert question("Use git-lfs or lfs to track files", "git-lfs") == "Use or to track files"


def test_each_command_lives_in_one_language_and_is_asked_in_the_others(tmp_path: Path) -> None:
    data, meta = build_with_meta(tldr_tree(tmp_path))
    placed = {doc_id.split("-", 1)[1]: doc_id.split("-", 1)[0] for doc_id in data.corpus}
    assert set(placed) == {"tar", "grep"}  # the alias page is dropped
    for qid, text in data.queries.items():
        (doc,) = data.qrels[qid]
        name = doc.split("-", 1)[1]
        info = meta[qid]
        assert info["doc_lang"] == placed[name]
        if info["kind"] == "cross":
            assert info["lang"] != info["doc_lang"] and name not in text.lower() and "`" not in text
        elif info["kind"] == "same":
            assert info["lang"] == info["doc_lang"]
    kinds = {(m["kind"], m["lang"]) for m in meta.values()}
    other = "en" if placed["tar"] == "cs" else "cs"
    assert ("cross", other) in kinds and ("code", "none") in kinds


def test_split_scores_counts_czech_cross_queries_twice() -> None:
    run = BeirRun("x", 2, 2, 3, 0.0, 0, 0.0)
    run.per_query["vec"] = {
        "a": {"ndcg@10": 1.0, "recall@10": 1.0, "mrr@10": 1.0},
        "b": {"ndcg@10": 0.0, "recall@10": 0.0, "mrr@10": 0.0},
        "c": {"ndcg@10": 0.5, "recall@10": 1.0, "mrr@10": 0.5},
    }
    meta = {
        "a": {"kind": "cross", "lang": "cs", "doc_lang": "en"},
        "b": {"kind": "cross", "lang": "ru", "doc_lang": "en"},
        "c": {"kind": "same", "lang": "en", "doc_lang": "en"},
    }
    scores = split_scores(run, meta)["vec"]
    assert scores["cross"]["ndcg@10"] == 0.5 and scores["cross"]["queries"] == 2
    assert scores["cross-cs"]["ndcg@10"] == 1.0 and scores["cross-cs"]["queries"] == 1
    assert scores["same"]["recall@10"] == 1.0


PARALLEL = {
    "en": {
        "ls": "# ls\n\n> List files.\n\n- List files one per line:\n\n`ls -1`\n\n- List all files, hidden ones too:\n\n`ls -a`\n",
        "cp": "# cp\n\n> Copy files.\n\n- Copy a file to another location:\n\n`cp {{source}} {{target}}`\n",
        "du": "# du\n\n> Disk usage.\n\n- Show the size of a directory:\n\n`du -sh {{path}}`\n",
    },
    "ru": {
        "ls": "# ls\n\n> Список файлов.\n\n- Вывести файлы по одному в строке:\n\n`ls -1`\n\n- Вывести все файлы, включая скрытые:\n\n`ls -a`\n",
        "cp": "# cp\n\n> Копирование.\n\n- Скопировать файл в другое место:\n\n`cp {{источник}} {{цель}}`\n",
        "du": "# du\n\n> Занятое место.\n\n- Показать размер каталога рекурсивно:\n\n`du -h {{путь}}`\n",
    },
}


def test_parallel_descriptions_pair_examples_of_commands_the_benchmark_never_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tldr_tree(tmp_path)
    for lang, pages in PARALLEL.items():
        for name, text in pages.items():
            (root / FOLDERS[lang] / "common" / f"{name}.md").write_text(text, encoding="utf-8")
    monkeypatch.setattr(tldr_mixed, "RU_COMMANDS", 1)  # one Russian command in the set, the others outside
    data, _ = build_with_meta(root)
    used = {doc.split("-", 1)[1] for doc in data.corpus}
    pairs = parallel_descriptions("ru", "en", root)
    commands = {name for name, _, _ in pairs}
    assert commands and not commands & used  # nothing learned from the pairs can leak into the set
    outside = {"ls", "cp", "du", "grep"} - used
    # du's translation changed its command line (`-sh` vs `-h`): not a pair
    assert commands == outside - {"du"}
    if "ls" in commands:
        assert ("ls", "Вывести все файлы, включая скрытые", "List all files, hidden ones too") in pairs
    assert all(left != right for _, left, right in pairs)


def test_alignment_helpers_recover_a_planted_rotation_and_language_direction() -> None:
    import numpy as np

    from bench.xl_alignment import inlp_basis, procrustes

    rng = np.random.default_rng(7)
    source = rng.normal(size=(200, 8)).astype(np.float32)
    rotation, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    target = source @ rotation.T
    assert np.allclose(procrustes(source, target, 1.0), rotation, atol=1e-4)
    assert np.allclose(procrustes(source, target, 0.0), np.eye(8), atol=1e-6)
    half = procrustes(source, target, 0.5)
    assert np.allclose(half @ half.T, np.eye(8), atol=1e-5)  # a blend is made orthogonal again

    direction = np.zeros(8, dtype=np.float32)
    direction[3] = 1.0
    labels = np.array(["en"] * 100 + ["cs"] * 100)
    vectors = rng.normal(size=(200, 8)).astype(np.float32) * 0.1
    vectors[labels == "cs"] += 2.0 * direction  # the languages differ along axis 3 only
    (found,) = inlp_basis(vectors, labels, ["cs", "en"], 0.1)
    assert abs(float(found @ direction)) > 0.95
