"""What is public is listed, and the list is the code: `docs/public-api.txt` holds every name
in the `__all__` of each public package, one `package.name` a line, and this test rebuilds the
list from the code and fails with the difference, so a change to the public surface is a diff
a reviewer sees (and a line in CHANGELOG.md). A renamed name keeps a deprecated alias that
warns for a release; the aliases are checked here too.

    .venv/bin/python tests/unit/test_public_api.py     # rewrite the file from the code
"""

from __future__ import annotations

import difflib
import importlib
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LISTED = ROOT / "docs" / "public-api.txt"

#: The public packages: the names in their `__all__` are what users may rely on. Every other
#: module, and every name not listed, may change without notice.
PUBLIC = (
    "durability",
    "durability.command",
    "durability.connect",
    "durability.operating",
    "durability.otel",
    "durability.postgres",
    "durability.redis",
    "durability.schedules",
    "durability.sqlite",
    "durability.testing",
    "durability.testing.conformance",
    "durability.web",
    "durability.worker",
    "experiments",
)

HEADER = """\
# The public API: every name in the `__all__` of the public packages, one `package.name` a
# line, sorted. Public packages: durability, durability.connect, durability.worker,
# durability.schedules, the stores
# (durability.redis, durability.postgres, durability.sqlite), durability.testing and its
# conformance suite (durability.testing.conformance), the operator's tools (durability.command,
# durability.operating, durability.web, durability.otel), and the lab's face, experiments
# (`import experiments as lab`). Any other module, and any name not listed here, may change
# without notice. A change to this list is a line in CHANGELOG.md; a renamed or removed name
# keeps a deprecated alias that warns for one release.
#
# tests/unit/test_public_api.py compares this file with the code; rewrite it with
#     .venv/bin/python tests/unit/test_public_api.py
"""


def public_names() -> list[str]:
    """`package.name` for every name in every public package's `__all__`, sorted."""
    names = []
    for package in PUBLIC:
        module = importlib.import_module(package)
        names += [f"{package}.{name}" for name in module.__all__]
    return sorted(names)


def listed_names() -> list[str]:
    lines = LISTED.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def test_the_public_api_file_lists_exactly_what_the_code_exports() -> None:
    listed, exported = listed_names(), public_names()
    if listed != exported:
        diff = "\n".join(
            difflib.unified_diff(listed, exported, "docs/public-api.txt", "the code", lineterm="")
        )
        pytest.fail(
            f"the public API changed:\n{diff}\n\nIf that is meant, add a line to CHANGELOG.md"
            " and rewrite the list: .venv/bin/python tests/unit/test_public_api.py",
            pytrace=False,
        )


@pytest.mark.parametrize("package", PUBLIC)
def test_every_exported_name_is_there_and_exported_once(package: str) -> None:
    module = importlib.import_module(package)
    assert len(module.__all__) == len(set(module.__all__)), f"{package} lists a name twice"
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == [], f"{package}.__all__ names what it does not have"


@pytest.mark.parametrize("module", ["durability.postgres", "durability.postgres.effect"])
def test_sql_effect_is_a_deprecated_alias_of_postgres_effect(module: str) -> None:
    from durability.deprecation import GOES_IN
    from durability.postgres import PostgresEffect

    found = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match="PostgresEffect") as told:
        alias = found.SqlEffect
    assert alias is PostgresEffect
    assert GOES_IN in str(told[0].message)
    assert told[0].filename == __file__  # stacklevel: it points at the code that asked
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="NoSuchEffect"):
            found.NoSuchEffect  # noqa: B018 (an unknown name is still an AttributeError)


def test_importing_the_old_name_still_works_and_warns() -> None:
    with pytest.warns(DeprecationWarning, match="SqlEffect is renamed PostgresEffect"):
        from durability.postgres import SqlEffect
    from durability.postgres import PostgresEffect

    assert SqlEffect is PostgresEffect
    assert "SqlEffect" not in importlib.import_module("durability.postgres").__all__


def _write() -> None:
    LISTED.write_text(HEADER + "\n".join(public_names()) + "\n", encoding="utf-8")
    print(f"wrote {LISTED.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _write()
