"""Where the embedded stack lives and listens: EOSBATCH_HOME, the EOSBATCH_*_PORT settings and its on/off
switches."""

from __future__ import annotations

import os
from pathlib import Path

from eosbatch import config


def home() -> Path:
    explicit = os.environ.get("EOSBATCH_HOME")  # the stack's state, logs and caches; unset: .eosbatch in the checkout
    if explicit:
        return Path(explicit).resolve()
    return Path(__file__).resolve().parents[2] / ".eosbatch"


def port(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    if not raw.isdigit() or not 1024 <= int(raw) <= 65534:
        raise config.ConfigError(name, f"must be a port number between 1024 and 65534, got {raw!r}")
    return int(raw)


def flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise config.ConfigError(name, f"must be 1 or 0, got {raw!r}")
