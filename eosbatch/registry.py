"""Where pipelines are found: the modules named in EOSBATCH_PIPELINES, the same for the CLI, the Spark
app and the DAGs. A module's pipelines are the `Pipeline` values among its globals, and those in its
`PIPELINES` list or tuple (pipelines built in a loop or by a factory); building a `Pipeline` registers
nothing. Pipelines built at run time, which no module holds (a test, a notebook), are added by `register`."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Iterator
from types import ModuleType

from eosbatch.config import PIPELINES
from eosbatch.exceptions import ConfigError
from eosbatch.pipeline import Pipeline

# Name -> (pipeline, where it was defined), for the pipelines registered by hand.
_REGISTERED: dict[str, tuple[Pipeline, str]] = {}


def _defined_in(pipeline: Pipeline) -> str:
    return getattr(pipeline.transform, "__module__", "?")


def register(*pipelines: Pipeline) -> None:
    """Adds pipelines built at run time. A name registered again from the same module (the transform's)
    replaces the earlier one; from another module it is refused, as two modules defining one name are."""
    for pipeline in pipelines:
        known = _REGISTERED.get(pipeline.name)
        module = _defined_in(pipeline)
        if known is not None and known[0] is not pipeline and known[1] != module:
            raise ConfigError("name", f"pipeline {pipeline.name!r} is defined twice ({known[1]} and {module})")
        _REGISTERED[pipeline.name] = (pipeline, module)


def defined_in(module: ModuleType) -> Iterator[Pipeline]:
    """The module's pipelines: its global `Pipeline` values, then those in its `PIPELINES` list or tuple."""
    found = vars(module)
    yield from (value for value in found.values() if isinstance(value, Pipeline))
    listed = found.get("PIPELINES", ())
    if isinstance(listed, (list, tuple)):
        yield from (value for value in listed if isinstance(value, Pipeline))


def _collect(found: Iterable[tuple[Pipeline, str]]) -> dict[str, Pipeline]:
    """By name; one object found in two places is one pipeline, two objects with one name are refused."""
    pipelines: dict[str, tuple[Pipeline, str]] = {}
    for pipeline, where in found:
        known = pipelines.get(pipeline.name)
        if known is not None and known[0] is not pipeline:
            raise ConfigError("name", f"pipeline {pipeline.name!r} is defined twice ({known[1]} and {where})")
        pipelines.setdefault(pipeline.name, (pipeline, where))
    return {name: pipeline for name, (pipeline, _) in pipelines.items()}


def modules(env: dict[str, str] | None = None) -> list[str]:
    raw = (os.environ if env is None else env).get(PIPELINES, "")
    return [m.strip() for m in raw.split(",") if m.strip()]


def _imported(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(PIPELINES, f"cannot import {name!r}: {exc}") from exc


def load(names: list[str] | None = None) -> dict[str, Pipeline]:
    """The pipelines of the modules `names` (default: EOSBATCH_PIPELINES) and those registered by hand."""
    imported = [_imported(name) for name in (names if names is not None else modules())]
    return _collect([*_REGISTERED.values(),
                     *((pipeline, module.__name__) for module in imported for pipeline in defined_in(module))])


def get(name: str) -> Pipeline:
    pipelines = load()
    if name not in pipelines:
        known = ", ".join(sorted(pipelines)) or f"none (set {PIPELINES} to your pipeline modules)"
        raise ConfigError("pipeline", f"no pipeline named {name!r}; known: {known}")
    return pipelines[name]
