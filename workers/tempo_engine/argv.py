"""Reading the engine's command line (vLLM's flags, as `--flag value` or `--flag=value`)."""

from __future__ import annotations

import json
from pathlib import Path


class CompatError(SystemExit):
    """A command line the engine cannot serve as tempo-rl needs: the server exits, saying why."""

    def __init__(self, message: str):
        super().__init__(f"tempo-rl engine: {message}")


def has_flag(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def flag_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def model_config(argv: list[str]) -> dict | None:
    """config.json of the served model (a local directory), or None."""
    return read_model_config(flag_value(argv, "--model"))


def read_model_config(path: str | None) -> dict | None:
    """config.json in the model directory `path`, or None."""
    try:
        config = json.loads((Path(path) / "config.json").read_text()) if path else None
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None
