"""Output formats of `query`, `grep`, `show` and `status`: text, json, jsonl, md, csv, files.

Each renderer is a pure function over the JSON-shaped dicts the commands print with --json, so
a field a hit gains there appears here too (csv and md read the optional ones with `.get`).
What they return is printed through search.terminal: note text never reaches the terminal as a
control character in any format. JSON and JSON lines keep the exact text (`\\uXXXX` escapes);
csv, md and files show such characters as visible escapes, as the text format does. Single-line
fields (names, headings, refs) are escaped so that a newline in them never starts a line;
multi-line fields (a hit's text, a file) keep their line breaks.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import click

from indexer.safe_text import safe_for_terminal
from search.terminal import echo, echo_json, echo_json_line, file_url

F = TypeVar("F", bound=Callable[..., Any])

NOTHING_FOUND = 1  # `query` and `grep` with no hit, as grep and ripgrep; 2 stays the usage error

FORMATS = ("text", "json", "jsonl", "md", "csv", "files")
HIT_FORMATS = (*FORMATS, "lines")  # query and grep: one line per hit too, for fzf and line tools
STATUS_FORMATS = ("text", "json", "jsonl", "md", "csv")  # status lists sources, not files

# csv columns, stable: a field a hit does not carry is an empty cell (README lists them)
QUERY_COLUMNS = (
    "rank",
    "ref",
    "source",
    "path",
    "line",
    "end_line",
    "match_line",
    "matched",
    "score",
    "breadcrumb",
    "rev",
    "snippet",
    "text",
    "file",
)
GREP_COLUMNS = ("ref", "source", "path", "line", "rev", "text", "file")
SHOW_COLUMNS = ("ref", "source", "path", "rev", "start_line", "end_line", "truncated", "text")
STATUS_COLUMNS = (
    "source",
    "kind",
    "path",
    "files",
    "chunks",
    "pending",
    "indexed_rev",
    "last_sync_at",
    "incomplete",
    "lags",
    "languages",
    "error",
)


def format_option(formats: tuple[str, ...] = FORMATS) -> Callable[[F], F]:
    """`--format`; the command keeps its own `--json` flag, the short form of `--format json`."""
    return click.option(
        "--format",
        "output_format",
        type=click.Choice(formats, case_sensitive=False),
        default=None,
        help="Output format (default text)"
        + ("; files: unique files, for piping" if "files" in formats else "")
        + ("; lines: one line per hit, REF<TAB>..., for fzf." if "lines" in formats else "."),
    )


def chosen_format(output_format: str | None, as_json: bool) -> str:
    """The one format asked for; `--json` with another `--format` is a usage error."""
    fmt = output_format.lower() if output_format else None
    if as_json and fmt not in (None, "json"):
        raise click.UsageError(f"--json means --format json; it cannot go with --format {fmt}")
    return "json" if as_json else fmt or "text"


# ---- escaping -------------------------------------------------------------------------------


def one_line(value: object) -> str:
    """A single-line field: every control character (newline included) as a visible escape."""
    return safe_for_terminal(_plain(value))


def block(value: object) -> str:
    """A multi-line field: line breaks kept, every other control character escaped."""
    return safe_for_terminal(_plain(value), multiline=True)


def _plain(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&#])")
_BACKTICKS = re.compile(r"`+")


def md_text(value: object) -> str:
    """Inline Markdown text: one line, punctuation that would format or link escaped."""
    return _MD_SPECIAL.sub(r"\\\1", one_line(value))


def md_code(value: object, *, in_table: bool = False) -> str:
    """An inline code span that holds any text (its fence outgrows the text's backtick runs)."""
    text = one_line(value)
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    span = f"{fence}{pad}{text}{pad}{fence}"
    return span.replace("|", "\\|") if in_table else span  # GFM splits cells at any bare pipe


def md_block(value: object, info: str = "text") -> str:
    """A fenced block that holds any text: its fence is longer than any backtick run inside."""
    text = block(value).rstrip("\n")
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


# ---- shared renderers -----------------------------------------------------------------------


def ref_of(record: Mapping[str, Any]) -> str:
    from search.refs import Ref

    return str(record.get("ref") or Ref(record["source"], record["path"]))


def md_ref(record: Mapping[str, Any], *, in_table: bool = False) -> str:
    """The ref as inline code, linked to the file on disk when the record has one."""
    code = md_code(ref_of(record), in_table=in_table)
    return f"[{code}]({file_url(record['file'])})" if record.get("file") else code


def render_files(records: Iterable[Mapping[str, Any]]) -> str:
    """Unique files in the records' order (rank order for query hits): the absolute path of a
    hit's `file` (what an editor or `xargs` takes; `show` and `open` take it too), else
    `source:path` (a git source without checkout)."""
    from search.refs import Ref

    seen = dict.fromkeys(record.get("file") or str(Ref(record["source"], record["path"])) for record in records)
    return "".join(one_line(name) + "\n" for name in seen)


# a note's own lines: they stay lines inside a quoted csv cell; every other cell (a path, a ref,
# a heading) is one line, its newlines shown as `\\n` as in the text output
MULTILINE_COLUMNS = frozenset({"snippet", "text"})


def render_csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """A header and one row per record; cells quoted by the csv module (a text's newlines stay
    inside its quoted cell), `\\n` line ends."""
    import csv  # only this format needs it: every query imports this module

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([(block if column in MULTILINE_COLUMNS else one_line)(row.get(column)) for column in columns])
    return out.getvalue()


# ---- query ----------------------------------------------------------------------------------


def query_csv(data: Mapping[str, Any]) -> str:
    return render_csv(QUERY_COLUMNS, ({"rank": rank, **hit} for rank, hit in enumerate(data["results"], 1)))


def query_md(data: Mapping[str, Any], full: bool = False) -> str:
    """`full`: each hit's `text` (then its whole chunk) in the fence instead of its snippet."""
    hits: list[Mapping[str, Any]] = data["results"]
    lines = [
        f"# Results for {md_code(data['query'])} ({md_text(data['mode'])}, {len(hits)} {'hit' if len(hits) == 1 else 'hits'})",
        "",
    ]
    if data.get("notice"):
        lines += [f"> notice: {md_text(data['notice'])}", ""]
    for rank, hit in enumerate(hits, 1):
        facts = [md_ref(hit), f"score {hit['score']:.4f}"]
        if hit.get("match_line") is not None:
            facts.append(f"match line {hit['match_line']}")
        if hit.get("matched"):
            facts.append(f"matched {md_text(hit['matched'])}")
        if hit.get("rev"):
            facts.append(f"rev {md_code(str(hit['rev'])[:12])}")
        lines += [f"## {rank}. {md_text(hit.get('breadcrumb') or hit['path'])}", "", " · ".join(facts), ""]
        shown = hit.get("text") if full else hit.get("snippet")
        lines += [md_block(shown or hit.get("text") or ""), ""]
    return "\n".join(lines)


def query_lines(data: Mapping[str, Any]) -> str:
    """Per hit `source:path:match_line` (what `show` and `open` take), a tab, the breadcrumb, a
    tab, the snippet on one line (at most LINE_SNIPPET_CHARS)."""
    from search.refs import Ref

    lines = []
    for hit in data["results"]:
        ref = str(Ref(hit["source"], hit["path"], hit["match_line"]))
        snippet = " ".join(str(hit.get("snippet") or "").split())[:LINE_SNIPPET_CHARS]
        lines.append(f"{_field(ref)}\t{_field(hit['breadcrumb'])}\t{_field(snippet)}\n")
    return "".join(lines)


LINE_SNIPPET_CHARS = 200  # a terminal line's worth: fzf shows one line per hit


def _field(value: object) -> str:
    """One tab-separated field: a tab inside becomes a space, every other control a visible escape."""
    return one_line(_plain(value).replace("\t", " "))


# ---- grep -----------------------------------------------------------------------------------


def grep_lines(data: Mapping[str, Any]) -> str:
    """Per matching line its ref `source:path:line`, a tab, and the line."""
    return "".join(f"{_field(hit['ref'])}\t{_field(hit['text'])}\n" for hit in data["results"])


def grep_md(data: Mapping[str, Any]) -> str:
    hits: list[Mapping[str, Any]] = data["results"]
    lines = [f"# grep {md_code(data['pattern'])} ({len(hits)} lines)", ""]
    if hits:
        lines += _table(("ref", "line"), ((md_ref(h, in_table=True), md_code(h["text"], in_table=True)) for h in hits))
        lines.append("")
    return "\n".join(lines)


def grep_csv(data: Mapping[str, Any]) -> str:
    return render_csv(GREP_COLUMNS, data["results"])


# ---- show -----------------------------------------------------------------------------------


def show_records(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    from search.refs import Ref

    return [{"ref": str(Ref(view["source"], view["path"], view["start_line"])), **view} for view in data["results"]]


def show_md(data: Mapping[str, Any]) -> str:
    from search.refs import Ref

    lines: list[str] = []
    for view in data["results"]:
        where = str(Ref(view["source"], view["path"]))
        span = f"lines {view['start_line']}–{view['end_line']}"
        lines += [f"## {md_code(where)} ({span})", ""]
        if view.get("rev"):
            lines += [f"rev {md_code(view['rev'])}", ""]
        lines += [md_block(view["text"], "markdown" if str(view["path"]).endswith(".md") else "text"), ""]
    return "\n".join(lines)


def show_csv(data: Mapping[str, Any]) -> str:
    return render_csv(SHOW_COLUMNS, show_records(data))


# ---- status ---------------------------------------------------------------------------------


def status_rows(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per source entry (csv, md); jsonl prints the entries themselves."""
    rows = []
    for entry in data["sources"]:
        lag = entry.get("lag") or {}
        rows.append(
            {
                **entry,
                "source": entry["id"],
                "lags": lag.get("lags"),
                "languages": " ".join(f"{lang}={count}" for lang, count in (entry.get("languages") or {}).items()),
                "error": entry.get("error") or lag.get("error"),
            }
        )
    return rows


def status_csv(data: Mapping[str, Any]) -> str:
    return render_csv(STATUS_COLUMNS, status_rows(data))


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{max(1, round(n / 2**20))} MB"


def server_memory_line(memory: Mapping[str, Any]) -> str:
    """The server's buffer pool beside what searches read, with what to do when it is too small."""
    line = (
        f"server memory: searches read {_size(memory['searched_bytes'])} of tables and indexes, "
        f"shared_buffers holds {_size(memory['buffer_pool_bytes'])}"
    )
    if memory["fits"]:
        return line
    return (
        f"{line}: searches copy pages in from the OS first (slower); "
        f"give shared_buffers {_size(memory['searched_bytes'])} or more"
    )


def status_md(data: Mapping[str, Any]) -> str:
    embedding = data["embedding"]
    lines = [
        f"# Index {md_code(data['db'])}",
        "",
        f"scope {md_text(data['scope'])} · embedding {md_text(embedding['provider'])} "
        f"{md_code(embedding['model'])} ({embedding['dims']} d)",
        "",
    ]
    if data.get("unfinished_copy"):
        from search.service.status import UNFINISHED_COPY_ADVICE  # the rest of status: not on a query's path

        lines += [
            f"Unfinished copy: a migrate into this index stopped before it was verified; {UNFINISHED_COPY_ADVICE}",
            "",
        ]
    if data.get("sync_running") is not None:
        lines += ["A sync is running: the counts may change until it finishes.", ""]
    if data.get("server_memory") is not None:
        lines += [md_text(server_memory_line(data["server_memory"]).capitalize()), ""]
    if embedding.get("reindex_needed"):
        lines += [f"Reindex needed: {md_text('; '.join(embedding['reindex_needed']))}", ""]
    if embedding.get("outage"):
        outage = embedding["outage"]
        next_try = f"; next sync tries it at {outage['next_try']}" if outage.get("next_try") else ""
        lines += [f"Embedder failing since {outage['since']}: {md_text(outage['error'])}{next_try}", ""]
    lines += _table(
        ("source", "kind", "path", "files", "chunks", "pending", "last change", "lags", "error"),
        (
            (
                md_code(row["source"], in_table=True),
                md_text(row["kind"]),
                md_code(row["path"], in_table=True) if row.get("path") else "",
                str(row.get("files", 0)),
                str(row.get("chunks", 0)),
                str(row.get("pending", 0)),
                md_text(row.get("last_sync_at") or "never"),
                {True: "yes", False: "no"}.get(row["lags"], "?"),
                md_text(row.get("error") or ""),
            )
            for row in status_rows(data)
        ),
    )
    lines.append("")
    return "\n".join(lines)


# ---- printing -------------------------------------------------------------------------------

Renderer = Callable[[Mapping[str, Any]], str]
Records = Callable[[Mapping[str, Any]], Iterable[Mapping[str, Any]]]

# per command: its records (jsonl, files), its csv and its md
RENDERERS: dict[str, tuple[Records, Renderer, Renderer]] = {
    "query": (lambda data: data["results"], query_csv, query_md),
    "grep": (lambda data: data["results"], grep_csv, grep_md),
    "show": (show_records, show_csv, show_md),
    "status": (lambda data: data["sources"], status_csv, status_md),
}

LINE_RENDERERS: dict[str, Renderer] = {"query": query_lines, "grep": grep_lines}


def emit(command: str, fmt: str, data: Mapping[str, Any]) -> None:
    """Print `data` (the command's --json document) as `fmt`; not for `text`, the command's own."""
    records, as_csv, as_md = RENDERERS[command]
    if fmt == "json":
        echo_json(data)
    elif fmt == "jsonl":
        for record in records(data):
            echo_json_line(record)
    elif fmt == "files":
        echo(render_files(records(data)), nl=False, multiline=True)
    elif fmt == "csv":
        echo(as_csv(data), nl=False, multiline=True)
    elif fmt == "md":
        echo(as_md(data), nl=False, multiline=True)
    elif fmt == "lines" and command in LINE_RENDERERS:
        echo(LINE_RENDERERS[command](data), nl=False, multiline=True)
    else:
        raise ValueError(f"no renderer for format {fmt!r}")
