"""What a run may change about an experiment: its configurations' own parameters (a latency
run's `rate` and `poll_ms`, a takeover's `lease_s`, a scaling run's `size`...) and the few
sizes its module reads from a configuration when one is given (`SETTINGS`: how long, how many).

An override replaces a parameter's values in every configuration that has it (a `poll_ms` of
None stays None); a list gives a configuration for each; a selector's (`SELECTORS`: `policies`'
`arm`) picks configurations instead: `--set arm=rate` runs one arm (`--merge`: only its rows
replaced). Names are checked against what the chosen experiments have, values against what
they can be, before anything starts, so a typo is an error naming the choices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from experiments.harness.backends import BACKENDS, Backend
from experiments.refusals import BadInput

__all__ = ["Overrides", "allowed", "apply", "check"]

#: Per experiment, each overridden parameter with the values it takes.
Overrides = Mapping[str, Mapping[str, tuple[Any, ...]]]


def allowed(experiment: ModuleType) -> dict[str, tuple[Any, ...]]:
    """Every parameter `experiment` can be given, with the values its configurations use
    (quick and full, over every backend); its `SETTINGS` with their defaults' meanings."""
    seen: dict[str, list[Any]] = {}
    for backend in BACKENDS.values():
        if not backend.applies(experiment.NAME):
            continue
        for quick in (True, False):
            for params in experiment.configurations(backend, quick):
                for key, value in params.items():
                    values = seen.setdefault(key, [])
                    if value is not None and value not in values:
                        values.append(value)
    for key in getattr(experiment, "SETTINGS", {}):
        seen.setdefault(key, [])
    return {key: tuple(values) for key, values in seen.items()}


def check(experiments: Sequence[ModuleType], given: Mapping[str, Any]) -> dict[str, dict[
        str, tuple[Any, ...]]]:
    """`given` (name -> a value or a list of values) split by experiment and checked: a name
    none of `experiments` has, or a value it cannot take, is a `ValueError` naming the choices."""
    known = {e.NAME: allowed(e) for e in experiments}
    unknown = [name for name in given if not any(name in k for k in known.values())]
    if unknown:
        choices = "; ".join(f"{name}: {', '.join(sorted(k))}" for name, k in known.items())
        raise BadInput(f"no parameter {', '.join(map(repr, unknown))} in "
                       f"{', '.join(known)}; choose from {choices}")
    split: dict[str, dict[str, tuple[Any, ...]]] = {}
    for name, value in given.items():
        values = tuple(value) if isinstance(value, list | tuple | set | frozenset) else (value,)
        if not values:
            raise BadInput(f"{name}: give at least one value")
        for experiment, params in known.items():
            if name in params:
                split.setdefault(experiment, {})[name] = tuple(
                    _checked(experiment, name, v, params[name]) for v in values)
    return split


def _checked(experiment: str, name: str, value: Any, seen: tuple[Any, ...]) -> Any:
    """`value` as the parameter's own type; a number must be positive and finite, anything
    else one of the values the experiment uses."""
    numbers = [v for v in seen if isinstance(v, int | float) and not isinstance(v, bool)]
    if not seen or (numbers and len(numbers) == len(seen)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadInput(f"{experiment} {name}: {value!r} is not a number")
        if not (math.isfinite(value) and value > 0):
            raise BadInput(f"{experiment} {name}: {value!r} must be a positive number")
        if any(isinstance(v, float) for v in numbers):
            return float(value)
        if numbers and value != int(value):
            raise BadInput(f"{experiment} {name}: {value!r} must be a whole number")
        return int(value) if numbers else value
    if value not in seen:
        raise BadInput(f"{experiment} {name}: {value!r} is not one of "
                       f"{', '.join(map(repr, seen))}")
    return value


def apply(configurations: list[dict[str, Any]], overrides: Mapping[str, tuple[Any, ...]],
          backend: Backend, selectors: Sequence[str] = ()) -> list[dict[str, Any]]:
    """`configurations` with each overridden parameter's values put in (one configuration per
    value, duplicates dropped, the order kept), but a selector's, which keeps only the
    configurations holding one of its values; a variant the backend lacks is dropped."""
    for key, values in overrides.items():
        if key in selectors:
            configurations = [p for p in configurations if p.get(key) in values]
            continue
        grown: list[dict[str, Any]] = []
        for params in configurations:
            if key in params and params[key] is None:
                grown.append(params)  # not a parameter of this backend's configuration
            else:
                grown += [{**params, key: value} for value in values]
        configurations = grown
    kept: list[dict[str, Any]] = []
    for params in configurations:
        if params.get("variant", "default") in backend.variants and params not in kept:
            kept.append(params)
    return kept
