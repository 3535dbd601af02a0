"""Schedules: a workflow started on a cron expression or an interval, by whichever worker comes
first, exactly once a firing.

| module | owns |
|---|---|
| `cadence` | when a schedule fires: cron (cronsim) or an interval, in a time zone |
| `schedule` | a schedule as a value, and the record text a store keeps of it |
| `timetable` | what a store must keep (`Timetable`), and the memory store's |
| `firing` | taking due firings, starting each as one workflow, and the body's `fired` |
| `handle` | `Schedules`: add, pause, resume, list, remove (`durable.schedules`) |
"""

from durability.schedules.cadence import Cadence
from durability.schedules.firing import FIRING, HOLD, Firing, fire_due, fired, start
from durability.schedules.handle import Schedules
from durability.schedules.schedule import BOUND, MISSED, ON_TIME, Missed, Schedule, firing_id
from durability.schedules.timetable import (
    Announced,
    MemoryTimetable,
    Subscribing,
    Timetable,
    Timetabled,
)

__all__ = [
    "BOUND",
    "Announced",
    "FIRING",
    "HOLD",
    "MISSED",
    "ON_TIME",
    "Cadence",
    "Firing",
    "MemoryTimetable",
    "Missed",
    "Schedule",
    "Schedules",
    "Subscribing",
    "Timetable",
    "Timetabled",
    "fire_due",
    "fired",
    "firing_id",
    "start",
]
