"""When a schedule fires: cron and intervals in a zone with daylight saving, and what a
schedule refuses. The store's part runs in the conformance suite (`ScheduleContract`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from durability.schedules import Cadence, Schedule, firing_id
from durability.schedules.schedule import ON_TIME

BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 1, 1, tzinfo=UTC)


def local(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=BERLIN)  # type: ignore[misc]


def nightly(expression: str) -> Cadence:
    return Cadence(expression, None, "Europe/Berlin", START)


def test_a_firing_in_the_skipped_hour_runs_just_after_the_gap() -> None:
    # 2026-03-29: Berlin's clocks go from 02:00 to 03:00; there is no 02:30 that night.
    cadence = nightly("30 2 * * *")
    first = cadence.after(local(2026, 3, 28, 12))
    assert first == local(2026, 3, 29, 3, 0)
    assert cadence.after(first) == local(2026, 3, 30, 2, 30)


def test_a_fixed_time_in_the_repeated_hour_runs_once() -> None:
    # 2026-10-25: Berlin's clocks go from 03:00 back to 02:00; 02:30 happens twice.
    cadence = nightly("30 2 * * *")
    first = cadence.after(local(2026, 10, 24, 12))
    # The first 02:30 (summer time, +02:00); an ambiguous local time compares across zones as
    # unequal to everything, so the test compares in UTC.
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert cadence.after(first) == local(2026, 10, 26, 2, 30)


def test_an_every_half_hour_cron_runs_in_both_copies_of_the_repeated_hour() -> None:
    cadence = nightly("*/30 * * * *")
    moment = local(2026, 10, 25, 1, 45)
    seen = []
    for _ in range(5):
        moment = cadence.after(moment)
        seen.append(moment.astimezone(UTC).strftime("%H:%M"))
    assert seen == ["00:00", "00:30", "01:00", "01:30", "02:00"]  # 02:00 and 02:30 twice, local


def test_an_interval_counts_real_time_across_a_dst_change() -> None:
    cadence = Cadence(None, timedelta(hours=1), "Europe/Berlin", local(2026, 3, 29, 0, 0))
    firings = [cadence.after(local(2026, 3, 29, 0, 0))]
    firings.append(cadence.after(firings[-1]))
    firings.append(cadence.after(firings[-1]))
    assert [f.astimezone(BERLIN).hour for f in firings] == [1, 3, 4]
    assert firings[2] - firings[0] == timedelta(hours=2)


def test_latest_is_bounded_by_its_count_and_its_start() -> None:
    cadence = Cadence("0 * * * *", None, "UTC", START)
    now = START + timedelta(days=365, minutes=30)  # a year of hourly firings missed
    assert cadence.latest(now, START, 2) == [
        START + timedelta(days=364, hours=23), START + timedelta(days=365)]
    assert cadence.latest(START + timedelta(hours=2), START + timedelta(hours=1), 10) == [
        START + timedelta(hours=1), START + timedelta(hours=2)]
    every = Cadence(None, timedelta(minutes=10), "UTC", START)
    assert every.latest(START + timedelta(minutes=35), START, 100) == [
        START + timedelta(minutes=m) for m in (0, 10, 20, 30)]


def test_skip_runs_a_firing_that_is_on_time_and_drops_a_late_one() -> None:
    cadence = Cadence(None, timedelta(hours=1), "UTC", START)
    schedule = Schedule("s", "b", None, cadence, missed="skip", next=START + timedelta(hours=1))
    due = START + timedelta(hours=1)
    assert schedule.plan(due + ON_TIME) == ([due], due + timedelta(hours=1))
    assert schedule.plan(due + ON_TIME + timedelta(seconds=1)) == ([], due + timedelta(hours=1))


def test_a_record_comes_back_as_it_went() -> None:
    cadence = nightly("0 3 * * 1-5")
    schedule = Schedule("nightly", "report", {"to": ["ops"]}, cadence, missed="all", bound=7,
                        next=START, fired=START - timedelta(days=1), pending=(START,),
                        held=START + timedelta(seconds=30))
    assert Schedule.from_record(schedule.to_record()) == schedule
    assert firing_id("nightly", START) == "nightly@2026-01-01T00:00:00.000Z"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "* * *"}, "malformed cron expression '\\* \\* \\*'"),
        ({"cron": "0 25 * * *"}, "malformed cron expression"),
        ({"cron": "0 3 * * *", "zone": "Europe/Atlantis"}, "unknown time zone 'Europe/Atlantis'"),
        ({"cron": "0 3 * * *", "zone": "../etc/passwd"}, "unknown time zone"),
        ({"every": timedelta(hours=1), "zone": "America"}, "unknown time zone 'America'"),
        ({"every": timedelta(hours=1), "zone": "x" * 5000}, "unknown time zone 'xxx"),
        ({"cron": "\u0663 * * * *"}, "malformed cron expression"),
        ({"cron": "9" * 400 + " * * * *"}, "malformed cron expression"),
        ({"every": timedelta(seconds=-1)}, "every"),
        ({"every": timedelta(microseconds=10)}, "at least a millisecond"),
        ({"cron": "0 3 * * *", "every": timedelta(hours=1)}, "exactly one of"),
    ],
)
def test_a_bad_cadence_is_refused_precisely(kwargs: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"cron": None, "every": None, "zone": "UTC"} | kwargs
    with pytest.raises(ValueError, match=message):
        Cadence(options["cron"], options["every"], options["zone"], START)  # type: ignore[arg-type]


def test_a_bad_schedule_is_refused_precisely() -> None:
    cadence = Cadence(None, timedelta(hours=1), "UTC", START)
    with pytest.raises(ValueError, match="missed must be one of skip, latest, all"):
        Schedule("s", "b", None, cadence, missed="never")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="may not hold '@'"):
        Schedule("a@b", "b", None, cadence)
    with pytest.raises(ValueError, match="workflow id"):
        Schedule("x" * 250, "b", None, cadence)
    from durability.codec import Unencodable

    with pytest.raises(Unencodable):
        Schedule("s", "b", {1, 2}, cadence)
