"""The environment every git subprocess runs with."""

from __future__ import annotations

import os

# `git rev-parse --local-env-vars`: set when we run inside a git hook, they would point our git
# commands at the repository that ran the hook instead of the mirror or the url we name. Other
# GIT_* variables (GIT_SSH_COMMAND, GIT_CONFIG_GLOBAL, ...) are the user's settings and stay.
REPO_LOCAL_ENV = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_OBJECT_DIRECTORY",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_GRAFT_FILE",
        "GIT_INDEX_FILE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_REPLACE_REF_BASE",
        "GIT_PREFIX",
        "GIT_SHALLOW_FILE",
        "GIT_COMMON_DIR",
        "GIT_QUARANTINE_PATH",
        "GIT_NAMESPACE",
    }
)


def git_environment(**extra: str) -> dict[str, str]:
    """This process's environment without the repository-locating variables, git never asking
    for credentials on a terminal (there may be none), plus `extra` (e.g. LC_ALL)."""
    env = {key: value for key, value in os.environ.items() if key not in REPO_LOCAL_ENV}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.update(extra)
    return env
