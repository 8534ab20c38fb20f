"""Where pipelines are found: the modules named in EOSBATCH_PIPELINES, the same for the CLI, the Spark
app and the DAGs. Building a `Pipeline` at module level registers it."""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from eosbatch.config import PIPELINES
from eosbatch.exceptions import ConfigError

if TYPE_CHECKING:
    from eosbatch.pipeline import Pipeline

_PIPELINES: dict[str, Pipeline] = {}
_MODULES: dict[str, str] = {}


def register(pipeline: Pipeline) -> None:
    module = getattr(pipeline.transform, "__module__", "?")
    known = _MODULES.get(pipeline.name)
    if known is not None and known != module:
        raise ConfigError("name", f"pipeline {pipeline.name!r} is defined twice ({known} and {module})")
    _PIPELINES[pipeline.name] = pipeline
    _MODULES[pipeline.name] = module


def modules(env: dict[str, str] | None = None) -> list[str]:
    raw = (os.environ if env is None else env).get(PIPELINES, "")
    return [m.strip() for m in raw.split(",") if m.strip()]


def load(names: list[str] | None = None) -> dict[str, Pipeline]:
    for module in names if names is not None else modules():
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(PIPELINES, f"cannot import {module!r}: {exc}") from exc
    return dict(_PIPELINES)


def get(name: str) -> Pipeline:
    pipelines = load()
    if name not in pipelines:
        known = ", ".join(sorted(pipelines)) or f"none (set {PIPELINES} to your pipeline modules)"
        raise ConfigError("pipeline", f"no pipeline named {name!r}; known: {known}")
    return pipelines[name]
