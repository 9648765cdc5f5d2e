"""`eval`: measured retrieval quality over the user's own question file."""

from __future__ import annotations

from pathlib import Path

import click

from search.cli.context import CliContext, pass_context
from search.engine import MODES
from search.evaluate import report_lines
from search.terminal import echo, echo_json


@click.command("eval")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--mode", "modes", multiple=True, type=click.Choice(MODES), help="Only this mode (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object with scores and misses per mode.")
@pass_context
def eval_command(context: CliContext, file: Path, modes: tuple[str, ...], as_json: bool) -> None:
    """Recall@1/5/10 and MRR per mode for a question file (YAML list or JSONL).

    Each question names the file that answers it: `path` is relative to its source root
    (as in query results), optionally `SOURCE:PATH` and `:LINE` or `:START-END`; `kind`
    (exact | semantic) splits the scores.
    """
    report = context.service().evaluate(file, modes)
    if as_json:
        echo_json(report.to_json())
    else:
        for line in report_lines(report):
            echo(line)
