"""Every experiment the lab has, by name, and the few terms its measure and its readers share.

An experiment is two modules that import nothing of each other: its measure
(`experiments/measures/<name>.py`: configurations and rows) and its summary
(`experiments/readers/summaries/<name>.py`: a table and a figure from those rows). What both
must name, how a rival is set for a question or the phases a worker is killed in, is here,
below both, so a reader never loads the code that runs an experiment to read its rows.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CLEANUP", "EXPERIMENTS", "KEYS", "PHASES", "RECOVERIES", "Recovery", "module_name",
           "tick_for"]

EXPERIMENTS = ("latency", "idle", "growth", "takeover", "throughput", "scaling", "wakeups",
               "contention", "scale-out", "lifecycle", "policies")


def module_name(experiment: str) -> str:
    """The module an experiment's measure and summary are named for (`scale-out`:
    `scale_out`): its name as a Python module may spell it."""
    return experiment.replace("-", "_")

# -- growth ------------------------------------------------------------------------------------

#: Each rival's queue at its defaults and with its own cleanup setting (None: it has none).
CLEANUP: dict[str, tuple[str, str | None]] = {
    "saq": ("job ttl=600 s (its default): a finished job's key is kept 10 minutes",
            "job ttl=-1: a finished job's key is deleted"),
    "arq": ("keep_result=3600 s (its default)", "keep_result=0: no result key"),
    "streaq": ("task ttl=300 s (its default)", "task ttl=0: no result kept"),
    "pgqueuer": ("its defaults: a log row per status change, kept until cleared by hand",
                 None),
    "procrastinate": ("delete_jobs=never (its default): every job's row and events stay",
                      "delete_jobs=always"),
}

# -- takeover ----------------------------------------------------------------------------------

#: When the worker holding the workflow is killed: `mid-step` a tick and a half into the step
#: (after the claim and the delivery were renewed), or `after-write` the moment an earlier
#: step's record has landed (a write is a sign of life, so the claim was fresh).
PHASES = ("mid-step", "after-write")


def tick_for(lease_s: float) -> float:
    """The workers' tick: a quarter of the lease, at most a second, so renewal keeps up with
    short leases."""
    return min(1.0, lease_s / 4)


@dataclass(frozen=True, slots=True)
class Recovery:
    """How a rival takes over a dead worker's job: what it sets (`setting`, made from the
    lease: `{L}` is the lease, `{Q}` a quarter of it), and, where it never does, why
    (`never`)."""

    setting: str
    never: str = ""


#: Each rival's ways of running a dead worker's job again (saq's sweep, arq's in-progress
#: expiry, streaq's reclaim, pgqueuer's heartbeat, procrastinate's stalled-job retry), as its
#: agent names them (`experiments.harness.rivals.<rival>` says how each is set).
RECOVERIES: dict[str, dict[str, Recovery]] = {
    "saq": {
        "sweep": Recovery("heartbeat={L} s, timeout=0, retries=2, sweep each {L} s"),
        "sweep-default-retries": Recovery(
            "heartbeat={L} s, timeout=0, retries=1, sweep each {L} s",
            never="retries=1: the sweep finishes a stuck job as aborted"),
    },
    "arq": {"expiry": Recovery("job_timeout={L} s: in-progress key lives {L} + 10 s")},
    "streaq": {"reclaim": Recovery("idle_timeout={L} s")},
    "pgqueuer": {"heartbeat": Recovery("heartbeat_timeout={L} s, dequeue_timeout={L} s")},
    "procrastinate": {
        "retry-stalled": Recovery("heartbeat each {Q} s; each 1 s a task retries jobs"
                                  " stalled {L} s"),
        "none": Recovery("heartbeat each {Q} s, no task retrying stalled jobs",
                         never="nothing retries a stalled job unless the application does"),
    },
}

# -- wakeups -----------------------------------------------------------------------------------

#: How each rival's race enqueues the poke: under its own key for one job per workflow
#: (True), or, where it has none, as a job of its own (False); that key in a word, and what
#: it does.
KEYS: dict[str, tuple[bool, str, str]] = {
    "saq": (True, "job key", "job key = workflow: refused while the job is queued or running"),
    "arq": (True, "job id", "_job_id = workflow: refused while queued, running or its result"
            " is kept"),
    "streaq": (False, "no key", "no key per job: a second job, run beside the first"),
    "pgqueuer": (True, "dedupe key", "dedupe_key = workflow: refused while queued or picked"),
    "procrastinate": (True, "lock", "queueing_lock and lock = workflow: refused only while"
                      " one waits, run after the first"),
}
