"""The report's tables and the intervals beside their numbers: what a reader is shown, from
rows made up here (no server, no run)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from experiments.readers.report import render, report
from experiments.readers.tables import SAME, number, window_lengths
from experiments.readers.uncertainty import Interval, distinguishable, quantile, quantiles, ratio
from experiments.results import write


def test_an_interval_is_the_same_every_time_and_holds_its_estimate() -> None:
    values = [random.Random(1).expovariate(1.0) for _ in range(300)]
    first, again = quantiles(values, [0.5, 0.99]), quantiles(values, [0.5, 0.99])
    assert first == again
    for found in first:
        assert found.lo <= found.estimate <= found.hi and found.n == 300


def test_one_sample_has_an_estimate_and_no_interval() -> None:
    found = quantile([4.0], 0.5)
    assert found.estimate == 4.0 and math.isnan(found.lo) and math.isnan(found.hi)
    assert not distinguishable(found)
    assert math.isnan(quantile([], 0.5).estimate)


def test_a_ratio_of_two_draws_of_one_distribution_is_not_told_apart_and_of_two_is() -> None:
    draw = random.Random(2)
    a = [draw.gauss(10, 1) for _ in range(200)]
    b = [draw.gauss(10, 1) for _ in range(200)]
    slow = [draw.gauss(20, 1) for _ in range(200)]
    assert not distinguishable(ratio(a, b))
    found = ratio(a, slow)
    assert distinguishable(found) and found.hi < 1
    assert Interval(1, 0.9, 1.1, 5).overlaps(Interval(1.05, 1.0, 1.2, 5))


@pytest.mark.parametrize(("value", "shown"), [
    (10617.46, "10,617"), (1_000_000.0, "1,000,000"), (25.51, "25.5"), (0.944, "0.944"),
    (0.00028, "0.00028"), (0.5, "0.5"), (1.0, "1"), (math.nan, ""), (None, ""), ("yes", "yes"),
    (0.99974, "1.00"), (99.97, "100"), (0.0099996, "0.0100"),  # rounded up to the next digit
])
def test_numbers_read_with_separators_and_no_e_notation(value: Any, shown: str) -> None:
    assert number(value) == shown


def test_a_table_too_wide_is_cut_into_parts_each_keeping_its_key() -> None:
    import pandas

    wide = pandas.DataFrame([{"backend": f"backend-{i}", **{f"column {c}": "12,345.6 (1 to 2)"
                                                           for c in range(12)}}
                             for i in range(3)]).set_index("backend")
    text = render(wide, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.count("backend-0") > 1  # the key is repeated in every part
    assert all(f"column {c}" in text for c in range(12))


def _latency(where: Path, *, started: int, submitted: int) -> None:
    draw = random.Random(3)
    rows: list[dict[str, Any]] = []
    for backend, scale in (("memory", 0.2), ("redis-stream", 1.0), ("saq", 1.01)):
        count = started if backend == "saq" else submitted
        for rate in (20.0, 500.0):
            base = {"backend": backend, "variant": "default", "rate": rate, "poll_ms": None}
            rows += [{**base, "submission": i, "metric": "submit_to_first_pass",
                      "value": draw.lognormvariate(math.log(scale), 0.3), "unit": "ms"}
                     for i in range(count)]
            rows.append({**base, "metric": "submissions", "value": submitted, "unit": "count"})
    write("latency", rows, {"mode": "full", "command": "made up by a test"}, where)


def test_the_report_flags_a_short_sample_and_a_ratio_it_cannot_tell_from_one(tmp_path: Path
                                                                             ) -> None:
    _latency(tmp_path, started=494, submitted=1000)
    text = report(tmp_path, ["latency"])
    assert "494 of 1,000" in text
    assert "understate" in text
    pivot = [line for line in text.splitlines() if line.startswith("saq ")]
    assert any(line.rstrip().endswith("*") for line in pivot)  # its cells starred
    lines = [line for line in text.splitlines() if line.startswith("redis-stream / saq")]
    assert lines and SAME in lines[0]  # 1.0 against 1.01: not distinguishable
    assert "not distinguishable at this sample size" in text
    assert "nan" not in text.lower().split() and "e+0" not in text
    assert max(len(line) for line in text.splitlines()) <= 120


def test_a_quick_run_is_said_to_be_small(tmp_path: Path) -> None:
    _latency(tmp_path, started=20, submitted=20)
    info = tmp_path / "latency.json"
    info.write_text(info.read_text().replace('"full"', '"quick"'))
    assert "A quick run" in report(tmp_path, ["latency"])


def test_a_slope_just_below_zero_reads_as_flat_noise() -> None:
    import pandas

    from experiments.readers.summaries.scaling import summary

    draw = random.Random(4)
    rows = [{"backend": "redis-set", "dimension": "ready", "size": size, "metric": "cost",
             "value": cost * draw.uniform(0.95, 1.05)}
            for size, cost in ((1_000, 0.25), (10_000, 0.26), (100_000, 0.15))
            for _ in range(50)]
    found = summary(pandas.DataFrame(rows)).iloc[0]
    assert found["slope"] < 0 and found["slope_lo"] <= found["slope"] <= found["slope_hi"]
    assert found["reads"] == "flat (below 0 is noise)"


def test_a_throughput_run_across_sizes_gives_a_ratio_at_each(tmp_path: Path) -> None:
    draw = random.Random(5)
    rows: list[dict[str, Any]] = []
    for backend, speed in (("postgres", {2000: 3000.0, 12000: 3000.0}),
                           ("pgqueuer", {2000: 3000.0, 12000: 6000.0})):
        for size, rate in speed.items():
            for repeat in range(5):
                base = {"backend": backend, "variant": "default", "processes": 1,
                        "workflows": size, "repeat": repeat}
                measured = rate * draw.uniform(0.97, 1.03)
                rows += [{**base, "metric": "passes_per_s", "value": measured},
                         {**base, "metric": "passes", "value": size}]
    write("throughput", rows, {"mode": "full"}, tmp_path)
    text = report(tmp_path, ["throughput"])
    ratios = [line for line in text.splitlines() if line.startswith("postgres / pgqueuer")]
    assert len(ratios) == 2  # one a size
    assert SAME in ratios[0] and "2,000" in ratios[0]  # the same at 2,000: not told apart
    assert SAME not in ratios[1] and "12,000" in ratios[1]


def test_repeats_that_disagree_widen_the_interval_as_pooling_would_not() -> None:
    from experiments.readers.uncertainty import nested, nested_ratio

    draw = random.Random(6)
    spells = [[draw.gauss(centre, 0.1) for _ in range(300)] for centre in (1.0, 1.5, 2.0)]
    pooled = quantile([v for spell in spells for v in spell], 0.5)
    (two_steps,) = nested(spells, [0.5])
    assert two_steps.estimate == pytest.approx(pooled.estimate)
    assert two_steps.hi - two_steps.lo > 3 * (pooled.hi - pooled.lo)
    steady = [[draw.gauss(1.5, 0.1) for _ in range(300)] for _ in range(3)]
    assert not distinguishable(nested_ratio(spells, steady))  # within the spells' spread
    assert distinguishable(ratio([v for s in spells for v in s], [v for s in steady for v in s],
                                 q=0.25))  # pooled, the 25th percentile tells them apart


def _takeovers(where: Path) -> Any:
    """Ours at a 1 s lease, and rivals killed mid-job: one taken over every time, one never,
    one in part."""
    rows: list[dict[str, Any]] = []
    for phase in ("mid-step", "after-write"):
        base = {"backend": "redis-stream", "variant": "default", "lease_s": 1.0, "phase": phase}
        rows += [{**base, "trial": i, "metric": "takeover", "value": 0.9 + i / 100, "unit": "s"}
                 for i in range(5)]
        rows.append({**base, "metric": "lease_plus_tick", "value": 1.25, "unit": "s"})
    for backend, recovery, taken in (("saq", "sweep", 5), ("saq", "sweep-default-retries", 0),
                                     ("pgqueuer", "heartbeat", 3)):
        base = {"backend": backend, "variant": "default", "lease_s": 1.0, "phase": "mid-job",
                "recovery": recovery}
        rows += [{**base, "trial": i, "metric": "takeover" if i < taken else "not_taken_over",
                  "value": 5.9 + i / 100 if i < taken else 26.0, "unit": "s"} for i in range(5)]
    write("takeover", rows, {"mode": "full", "command": "made up by a test"}, where)
    from experiments.results import load

    return load("takeover", where)


def test_a_rival_never_taken_over_is_never_in_the_typical_takeover_not_nan(tmp_path: Path
                                                                           ) -> None:
    from experiments.readers.summaries.takeover import summary, typical

    frame = _takeovers(tmp_path)
    never = typical(frame, "saq", 1.0, "sweep-default-retries")
    assert math.isinf(never.estimate) and math.isinf(never.lo) and math.isinf(never.hi)
    partly = typical(frame, "pgqueuer", 1.0, "heartbeat")  # 3 of 5: the middle kill ran again
    assert partly.n == 5 and not math.isinf(partly.estimate) and math.isinf(partly.hi)
    assert typical(frame, "saq", 1.0, "sweep").estimate == pytest.approx(5.92)
    ours = typical(frame, "redis-stream", 1.0)  # both phases pooled, the rivals' not in it
    assert ours.n == 10 and ours.lo <= ours.estimate <= ours.hi
    table = summary(frame).set_index(["backend", "recovery"])
    assert table.loc[("saq", "sweep-default-retries"), "note"].startswith("never")
    assert table.loc[("pgqueuer", "heartbeat"), "note"] == "3 of 5 taken over"


def test_the_rivals_takeovers_have_a_table_of_their_own_within_the_width(tmp_path: Path
                                                                         ) -> None:
    _takeovers(tmp_path)
    text = report(tmp_path, ["takeover"])
    assert "saq (sweep-default-retries)" in text and "never" in text
    assert "nan" not in text.lower().split() and "inf" not in text.lower()
    assert max(len(line) for line in text.splitlines()) <= 120
    typical = text.split("Killed mid-step")[0]
    assert "saq" not in typical.split("Takeover (s)")[1]  # ours' leases, not the rivals'


def test_the_takeover_figure_draws_rivals_alone_and_beside_ours(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from experiments.readers.summaries.takeover import draw

    frame = _takeovers(tmp_path)
    for part in (frame, frame[frame["phase"] == "mid-job"]):
        fig = draw(part)
        titles = [ax.get_title() for ax in fig.axes]
        assert any(t.startswith("Rivals, killed mid-job") for t in titles)
        plt.close(fig)


def test_a_share_of_trials_has_an_interval_even_at_none_and_all() -> None:
    from experiments.readers.uncertainty import proportion

    none, all_, some = proportion(0, 300), proportion(300, 300), proportion(238, 300)
    assert none.estimate == 0 and none.lo == 0 and 0.012 < none.hi < 0.013  # the rule of three
    assert all_.hi == 1 and math.isclose(all_.lo, 1 - none.hi)  # the same, mirrored
    assert some.lo < 238 / 300 < some.hi and math.isclose(some.lo, 1 - proportion(62, 300).hi)
    assert proportion(3, 30).hi - proportion(3, 30).lo > some.hi - some.lo  # fewer: wider
    assert math.isnan(proportion(0, 0).estimate)


def test_the_wakeups_table_and_figure_say_how_many_could_have_been_lost(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt
    import pandas

    from experiments.readers.summaries.wakeups import draw

    rows = [{"backend": backend, "metric": metric, "value": value, "unit": "count"}
            for backend, lost in (("redis-stream", 0), ("saq", 238))
            for metric, value in (("races", 300), ("lost", lost), ("refused", lost))
            if metric != "refused" or backend == "saq"]  # a rival's poke can be refused
    write("wakeups", rows, {"mode": "full", "command": "made up by a test"}, tmp_path)
    text = report(tmp_path, ["wakeups"])
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert "at most 1.3%" in lines["redis-stream"]
    assert "74\N{EN DASH}84%" in lines["saq"]
    assert "Wilson score interval" in text
    fig = draw(pandas.DataFrame(rows))
    fig.canvas.draw()
    words = [t.get_text() for t in fig.axes[0].texts]
    plt.close(fig)
    assert "300 raced, none lost (at most 1.3%)" in words
    assert "300 raced, 238 lost (74\N{EN DASH}84%), 238 refused" in words


def test_idle_windows_repeated_carry_an_interval_and_one_window_says_it_has_none(
    tmp_path: Path,
) -> None:
    import pandas

    from experiments.readers.summaries.idle import summary

    def rows(windows: int) -> list[dict[str, Any]]:
        return [{"backend": "redis-set", "variant": "default", "repeat": r, "metric": metric,
                 "value": value * (1 + r / 10), "unit": "1/s"}
                for r in range(windows)
                for metric, value in (("window", 15.0), ("worker_requests", 1.7),
                                      ("worker_cpu", 0.001))]

    once = summary(pandas.DataFrame(rows(1)))
    assert math.isnan(once["worker_requests_lo"].iloc[0])
    write("idle", rows(3), {"mode": "full", "command": "made up by a test"}, tmp_path)
    thrice = summary(pandas.DataFrame(rows(3)))
    assert thrice["worker_requests_lo"].iloc[0] < 1.87 < thrice["worker_requests_hi"].iloc[0]
    text = report(tmp_path, ["idle"])
    assert "1.87 (1.7\N{EN DASH}2.04)" in text and "the median of 3 windows" in text
    write("idle", rows(1), {"mode": "full", "command": "made up by a test"}, tmp_path)
    assert "no repeats: no interval" in report(tmp_path, ["idle"])


def test_idle_windows_of_several_lengths_are_each_said_with_their_backends() -> None:
    import pandas as pd

    windows = pd.DataFrame({"backend": ["redis-stream", "sqlite", "saq"],
                            "metric": "window", "value": [180.0, 180.0, 15.0]})
    assert window_lengths(windows) == " (180 s for redis-stream, sqlite; 15 s for saq)"
    assert window_lengths(windows[windows["backend"] != "saq"]) == " of 180 s"
    assert window_lengths(windows.iloc[0:0]) == ""


def test_growth_repeated_gives_each_run_its_own_peak_and_end_then_their_median(
    tmp_path: Path,
) -> None:
    import matplotlib.pyplot as plt
    import pandas

    from experiments.readers.summaries.growth import draw, summary

    def rows(runs: int) -> list[dict[str, Any]]:
        # each run's queue climbs to its peak and ends lower; run r peaks at 100 + 10r and ends
        # at 5 + r, and its samples interleave in time with the other runs' (a merged frame)
        return [{"backend": "redis-stream", "trimming": "True", "repeat": r, "part": "",
                 "t_s": t + r / 10, "metric": metric, "value": value, "unit": "count"}
                for r in range(runs)
                for t, entries in enumerate((0, 100 + 10 * r, 5 + r))
                for metric, value in (("entries", entries), ("bytes", entries * 64))]

    once = summary(pandas.DataFrame(rows(1)))
    assert once["peak_entries"].iloc[0] == 100 and once["final_entries"].iloc[0] == 5
    assert math.isnan(once["peak_entries_lo"].iloc[0]) and once["repeats"].iloc[0] == 1
    thrice = summary(pandas.DataFrame(rows(3)))
    # the median of 100, 110, 120 and of 5, 6, 7: not the last sample of the merged frame (7)
    # nor the highest of all (120)
    assert thrice["peak_entries"].iloc[0] == 110 and thrice["final_entries"].iloc[0] == 6
    assert thrice["peak_entries_lo"].iloc[0] <= 110 <= thrice["peak_entries_hi"].iloc[0]
    assert thrice["peak_entries_hi"].iloc[0] - thrice["peak_entries_lo"].iloc[0] > 0
    write("growth", rows(3), {"mode": "full", "command": "made up by a test"}, tmp_path)
    text = report(tmp_path, ["growth"])
    assert "the median of 3 runs each" in text and "110 (" in text
    write("growth", rows(1), {"mode": "full", "command": "made up by a test"}, tmp_path)
    assert "one run each: no interval" in report(tmp_path, ["growth"])
    fig = draw(pandas.DataFrame(rows(3)))
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_ydata()) == [0, 100, 5]  # the first run's line, not three zigzagged
    assert "the first repeat" in fig.axes[0].get_title()
    plt.close(fig)


def test_an_interval_says_whether_it_was_drawn_over_repeats_or_one_run_s_submissions() -> None:
    from experiments.readers.tables import resampling

    assert resampling({"redis-stream": 3, "saq": 3}) == (
        "a bootstrap over the 3 repeats, then the submissions within each")
    mixed = resampling({"redis-stream": 3, "saq": 3, "arq": 1, "memory": 1})
    assert "over the repeats" in mixed and "for arq, memory, run once" in mixed
    assert "this one run" in resampling({"redis-stream": 1}) and "--repeat" in resampling({})


def test_an_interval_that_reads_as_its_estimate_is_not_printed_beside_it() -> None:
    from experiments.readers.tables import agreed

    assert agreed(0.21601, 0.21598, 0.21603)  # "0.216 (0.216-0.216)" says nothing more
    assert not agreed(19.5, 19.3, 19.5)
    assert agreed(5000.0, 5000.0, 5000.0) and not agreed(1200.0, 1191.0, 1200.0)


def test_every_table_lists_backends_ours_by_family_then_the_rivals(tmp_path: Path) -> None:
    from experiments.readers import reading
    from experiments.readers.tables import views

    merged = ["saq", "sqlite", "postgres", "redis-stream-cluster", "redis-set", "memory",
              "pgqueuer", "redis-stream"]  # as a merge of several runs would leave them
    canonical = ["memory", "redis-stream", "redis-set", "redis-stream-cluster", "postgres",
                 "sqlite", "saq", "pgqueuer"]
    draw = random.Random(4)
    rows = [{"backend": b, "variant": "default", "rate": 20.0, "poll_ms": None, "repeat": 0,
             "submission": i, "metric": "submit_to_first_pass",
             "value": draw.lognormvariate(0, 0.3), "unit": "ms"}
            for b in merged for i in range(30)]
    write("latency", rows, {"mode": "full", "command": "made up by a test"}, tmp_path)
    (headline, *_) = views("latency", reading.frame("latency", tmp_path))
    assert [b for b, _ in headline.table.index] == canonical
    assert list(reading.table("latency", tmp_path)["backend"]) == canonical
