"""The figures' look and their drawing from whatever a run left: every backend a look of its
own (a family's hue, told apart within the family), a registered name a stable hue of its
own, crowded axes split by family, and every figure drawn from the reference, from one
backend's rows, and with intervals where a summary carries them. Nothing here reads a timing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from experiments.__main__ import main
from experiments.harness.backends import BACKENDS
from experiments.readers import figures
from experiments.readers.figures import DRAWN, bounds, family, look, order, panels
from experiments.results import RESULTS, load

ROOT = Path(__file__).resolve().parents[2]


def _every_series() -> list[tuple[str, str]]:
    return [(b.name, v) for b in BACKENDS.values() for v in b.variants]


def test_every_backend_in_every_variant_is_drawn_unlike_every_other() -> None:
    seen = {}
    for backend, variant in _every_series():
        mine = look(backend, variant)
        key = (mine.colour, mine.dashes, mine.marker, mine.hollow)
        assert key not in seen, f"{backend} ({variant}) is drawn as {seen[key]}"
        seen[key] = f"{backend} ({variant})"


def test_a_family_shares_a_hue_that_no_other_family_uses() -> None:
    hues: dict[str, set[str]] = {}
    for backend, variant in _every_series():
        hues.setdefault(family(backend), set()).add(look(backend, variant).colour)
    assert family("redis-stream") == family("redis-set-polled") != family("postgres")
    assert len({family(b.rival) for b in BACKENDS.values() if b.rival}) == 5
    for kin, colours in hues.items():
        for other, theirs in hues.items():
            assert kin == other or not colours & theirs, (kin, other)


def test_a_variant_keeps_its_backends_hue_and_changes_its_line() -> None:
    plain, tuned = look("saq"), look("saq", "tuned")
    assert plain.colour == tuned.colour
    assert (plain.dashes, plain.hollow) != (tuned.dashes, tuned.hollow)
    assert tuned.name == "saq (tuned)" and plain.name == "saq"
    assert look("saq", float("nan")).name == "saq"  # a blank variant column is the default


def test_a_registered_name_gets_a_hue_of_its_own_the_same_in_any_process() -> None:
    known = {look(b, v).colour for b, v in _every_series()}
    mine = look("my-set")
    assert mine.colour not in known
    assert family("my-set") == "my-set"
    script = "from experiments.readers.figures import look; print(look('my-set').colour)"
    for seed in ("1", "2"):  # Python salts str hashes per process: the hue must not move
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        printed = subprocess.run([sys.executable, "-c", script], env=env, text=True,
                                 capture_output=True, check=True).stdout.strip()
        assert printed == mine.colour


def test_a_few_series_share_one_panel_and_many_split_by_family() -> None:
    assert panels(["sqlite", "memory"]) == [("", ["memory", "sqlite"])]
    assert panels([]) == []
    split = panels([*BACKENDS, "my-set"])
    titles = [title for title, _ in split]
    assert titles == ["ours on Redis", "ours on Postgres", "SQLite and memory",
                      "rivals on Redis", "rivals on Postgres", "yours"]
    assert dict(split)["yours"] == ["my-set"]
    assert sorted(b for _, chosen in split for b in chosen) == sorted([*BACKENDS, "my-set"])
    assert [t for t, _ in panels(["saq", "arq", "postgres"], series=9)] == [
        "ours on Postgres", "rivals on Redis"]  # families with nothing to show are dropped


def test_backends_are_ordered_family_by_family() -> None:
    assert order(["saq", "sqlite", "my-set", "redis-set", "memory", "redis-stream"]) == [
        "memory", "redis-stream", "redis-set", "sqlite", "saq", "my-set"]


def test_an_interval_is_read_only_where_the_summary_carries_one() -> None:
    import pandas

    table = pandas.DataFrame({"p50": [1.0, 2.0]})
    assert bounds(table, "p50") is None
    table["p50_lo"], table["p50_hi"] = [0.5, 1.5], [1.5, 2.5]
    found = bounds(table, "p50")
    assert found is not None and list(found[0]) == [0.5, 1.5] and list(found[1]) == [1.5, 2.5]


def _committed(name: str) -> bool:
    return (RESULTS / f"{name}.csv").exists()


def _draw(name: str, frame: Any) -> Any:
    import importlib

    import matplotlib.pyplot as plt

    from experiments.catalogue import module_name

    fig = importlib.import_module(f"experiments.readers.summaries.{module_name(name)}").draw(frame)
    fig.canvas.draw()  # lay it out: a legend or a tick that cannot be placed fails here
    plt.close(fig)
    return fig


@pytest.mark.slow
@pytest.mark.parametrize("name", DRAWN)
def test_each_figure_draws_from_the_reference_and_from_one_backends_rows(name: str) -> None:
    if not _committed(name):
        pytest.skip(f"no committed {name}.csv")
    frame = load(name, RESULTS)
    _draw(name, frame)
    alone = order(frame["backend"])[-1]  # a partial run: the rows of one backend only
    _draw(name, frame[frame["backend"] == alone])


def test_idle_draws_one_bar_kind_a_legend_entry_and_says_what_was_not_counted() -> None:
    import pandas

    from experiments.readers.summaries import idle

    rows = [{"backend": "sqlite", "variant": "default", "metric": m, "value": v}
            for m, v in (("worker_requests", 20.0), ("worker_round_trips", 20.0),
                         ("worker_cpu", 0.01))]
    fig = _draw("idle", pandas.DataFrame(rows))
    entries = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert entries[0] == "the worker's own count"
    assert "the server's count" not in entries  # no server bar drawn, so none in the legend
    assert idle.summary(pandas.DataFrame(rows))["worker_requests"].iloc[0] == 20.0


def test_the_latency_figure_draws_a_median_interval_only_where_one_is_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas

    from experiments.readers.summaries import latency

    rows = [{"backend": "memory", "variant": "default", "rate": 20.0, "poll_ms": None,
             "metric": "submit_to_first_pass", "value": float(v)} for v in range(1, 41)]
    frame = pandas.DataFrame(rows)
    given = latency.summary  # carries p50_lo and p50_hi (experiments.readers.uncertainty)

    def without_intervals(rows: Any) -> Any:
        table = given(rows)
        return table.drop(columns=[c for c in table.columns if c.endswith(("_lo", "_hi"))])

    monkeypatch.setattr(latency, "summary", without_intervals)
    plain = sum(len(ax.lines) for ax in _draw("latency", frame).axes)
    monkeypatch.setattr(latency, "summary", given)
    assert sum(len(ax.lines) for ax in _draw("latency", frame).axes) == plain + 1


def _wakeups_into(folder: Path) -> None:
    """The reference run's wakeups rows and metadata, copied into `folder` (a skip without)."""
    if not _committed("wakeups"):
        pytest.skip("no committed wakeups.csv")
    for suffix in ("csv", "json"):
        shutil.copy(RESULTS / f"wakeups.{suffix}", folder / f"wakeups.{suffix}")


def test_the_figures_command_draws_a_folders_rows_again_and_refuses_unknown_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _wakeups_into(tmp_path)
    assert main(["figures", "--results", str(tmp_path)]) == 0
    assert (tmp_path / "figures" / "wakeups.png").stat().st_size > 0
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["wakeups.png"]
    assert main(["figures", "chaos", "--results", str(tmp_path)]) == 2
    assert main(["figures", "latency", "--results", str(tmp_path)]) == 2
    assert "no latency.csv" in capsys.readouterr().err
    assert figures.redraw(tmp_path, ["wakeups"]) == [tmp_path / "figures" / "wakeups.png"]


def test_the_figures_command_names_each_figure_it_drew_on_a_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _wakeups_into(tmp_path)
    assert main(["figures", "wakeups", "--results", str(tmp_path)]) == 0
    said = capsys.readouterr()
    assert said.out.splitlines() == [f"drew {tmp_path / 'figures' / 'wakeups.png'}"]
    assert said.err == ""


def test_the_scaling_figure_shades_each_medians_interval_where_there_are_repetitions() -> None:
    import pandas
    from matplotlib.collections import PolyCollection

    def rows(repeats: int) -> Any:
        return pandas.DataFrame([
            {"backend": backend, "dimension": "records", "size": size, "metric": "cost",
             "repetition": r, "value": size * scale * (1 + r / 10)}
            for backend, scale in (("memory", 0.001), ("sqlite", 0.01))
            for size in (10, 100, 1000) for r in range(repeats)])

    def shaded(fig: Any) -> list[Any]:
        return [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]

    def said(fig: Any) -> str:
        return " ".join(legend.get_title().get_text() for ax in fig.axes
                        if (legend := ax.get_legend()) is not None)

    many = _draw("scaling", rows(20))
    assert len(shaded(many)) == 2  # a band a backend, in the records panel
    assert "95% interval" in said(many)
    once = _draw("scaling", rows(1))  # one repetition a size: nothing to resample
    assert shaded(once) == [] and "no interval" in said(once)


def test_idle_draws_a_whisker_over_repeated_windows_with_its_number_past_it() -> None:
    import pandas

    rows = [{"backend": "sqlite", "variant": "default", "repeat": r, "metric": m,
             "value": v * (1 + r / 5)}
            for r in range(3) for m, v in (("worker_requests", 20.0), ("worker_cpu", 0.01))]
    fig = _draw("idle", pandas.DataFrame(rows))
    ax = fig.axes[0]
    whiskers = [c for c in ax.collections if c.get_segments()]
    assert whiskers  # the interval over the three windows
    hi = max(seg[:, 0].max() for c in whiskers for seg in c.get_segments())
    (label,) = [t for t in ax.texts if t.get_text() == "24"]  # the median of 20, 24, 28
    assert label.xy[0] >= hi


def test_a_swept_backend_is_labelled_woken_from_its_own_rows_not_its_name() -> None:
    import pandas

    from experiments.readers.summaries.latency import _woken

    def swept(p50s: list[float]) -> pandas.DataFrame:
        return pandas.DataFrame({"poll_ms": [5.0, 25.0, 50.0], "p50": p50s})

    assert _woken(swept([1.3, 1.4, 1.3]))  # a doorbell: flat whatever the poll
    assert not _woken(swept([3.0, 12.0, 30.0]))  # half a poll: polled
