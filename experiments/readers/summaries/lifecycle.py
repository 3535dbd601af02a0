"""`lifecycle` read back: per backend, each timing (a cancel's call and its time to stopped
for a pass mid-step, a sleeper and a blocked one; ending to `result`) at its median and 99th
percentile with their intervals (`summary`), the cancel/finish race's counts (`races`), and the
figure: a panel a question, a bar a backend (`draw`)."""

from __future__ import annotations

import math
from typing import Any

#: The timings, in the order a table shows them: (case, metric, what it is in words).
TIMINGS = (
    ("mid-step", "cancel", "cancel call, a pass mid-step"),
    ("mid-step", "to_stopped", "cancel returned to the pass stopped (mid-step)"),
    ("mid-step", "after_effect", "the step's effect ended to the pass stopped"),
    ("sleeper", "cancel", "cancel call, a sleeper"),
    ("sleeper", "to_stopped", "cancel returned to status cancelled (sleeper)"),
    ("blocked", "cancel", "cancel call, a blocked one"),
    ("blocked", "to_stopped", "cancel returned to status cancelled (blocked)"),
    ("result", "to_result", "the completing pass's body returned to result returning"),
)
#: What each case's bar in the figure's first panel is.
_CASES = {"mid-step": "mid-step: effect ended to stopped", "sleeper": "sleeper: status cancelled",
          "blocked": "blocked: status cancelled"}
#: The race's counts, in the order a table shows them.
COUNTS = ("races", "cancel_won", "pass_won", "both", "lost", "revived")


def summary(frame: Any) -> Any:
    """Per backend and timing (`TIMINGS`): its samples (`n`), `p50` and `p99` in ms, each with
    its bootstrap interval (`_lo`, `_hi`: `uncertainty.quantiles` over the samples)."""
    import pandas

    from experiments.readers.uncertainty import quantiles

    timed = frame[frame["unit"] == "ms"]
    rows = []
    for backend in dict.fromkeys(timed["backend"]):
        mine = timed[timed["backend"] == backend]
        for case, metric, what in TIMINGS:
            values = mine[(mine["case"] == case) & (mine["metric"] == metric)]["value"]
            if not len(values):
                continue
            p50, p99 = quantiles(values.to_numpy(dtype=float), [0.5, 0.99])
            rows.append({"backend": backend, "case": case, "metric": metric, "what": what,
                         "n": len(values), "p50": p50.estimate, "p50_lo": p50.lo,
                         "p50_hi": p50.hi, "p99": p99.estimate, "p99_lo": p99.lo,
                         "p99_hi": p99.hi})
    return pandas.DataFrame(rows, columns=["backend", "case", "metric", "what", "n", "p50",
                                           "p50_lo", "p50_hi", "p99", "p99_lo", "p99_hi"])


def races(frame: Any) -> Any:
    """Per backend, the race's counts (`COUNTS`, summed over repeats): `both` and `lost` must
    be 0; `revived` counts blocked workflows that ran a step after being cancelled (must be 0).
    The backends in the tables' order, however a merge left the rows."""
    from experiments.readers.figures import in_order

    counted = frame[frame["unit"] == "count"]
    table = counted.pivot_table(index="backend", columns="metric", values="value",
                                aggfunc="sum", sort=False)
    for name in COUNTS:
        if name not in table:
            table[name] = math.nan
    return in_order(table[list(COUNTS)].reset_index()).reset_index(drop=True)


def draw(frame: Any) -> Any:
    """A panel a question (a cancel's time to stopped, a case a colour shade, mid-step from
    its effect's end; ending to result), a bar a backend at its median with the 99th
    percentile marked, whiskers the median's interval; the race's counts in words beside each
    backend's name."""
    from experiments.readers.figures import figure, label, look, nothing, order, plain_log

    table = summary(frame)
    counts = races(frame).set_index("backend")
    names = order(table["backend"])
    fig, axes = figure(columns=2, width=5.0, height=1.2 + 0.5 * max(len(names), 3))
    # A pass mid-step stops at its next write: what the design adds is from the effect's end
    # (the rest of the wait is the effect, which a cancel never cuts short).
    panels = ((axes[0][0], ("mid-step", "sleeper", "blocked"), "Cancelled to stopped"),
              (axes[0][1], ("result",), "Ending to result returning"))
    for ax, cases, title in panels:
        if not names:
            nothing(ax, "nothing measured in this run")
            continue
        height = 0.8 / len(cases)
        for i, backend in enumerate(names):
            seen = look(backend)
            for j, case in enumerate(cases):
                metric = {"mid-step": "after_effect", "result": "to_result"}.get(case,
                                                                                  "to_stopped")
                found = table[(table["backend"] == backend) & (table["case"] == case)
                              & (table["metric"] == metric)]
                if not len(found):
                    continue
                r = found.iloc[0]
                y = i - 0.4 + height * (j + 0.5)
                ax.barh(y, r["p50"], height=height * 0.9, color=seen.colour,
                        alpha=1.0 - 0.3 * j)
                if r["p50_lo"] == r["p50_lo"]:
                    ax.errorbar([r["p50"]], [y], xerr=[[r["p50"] - r["p50_lo"]],
                                                       [r["p50_hi"] - r["p50"]]],
                                fmt="none", ecolor="black", elinewidth=1, capsize=2)
                ax.plot([r["p99"]], [y], marker="|", color="black", markersize=8)
                if len(cases) > 1:
                    ax.annotate(_CASES[case], (r["p99"], y), xytext=(4, 0),
                                textcoords="offset points", va="center", fontsize=7)
        ticks = [f"{b}\n{_said(counts, b)}" for b in names]
        ax.set_yticks(range(len(names)), ticks, fontsize=8)
        ax.set_ylim(len(names) - 0.5, -0.5)
        ax.set_xscale("log")
        plain_log(ax, "x")  # a quick run spans less than a decade: plain numbers, not powers
        ax.grid(axis="y", visible=False)
        label(ax, title, "ms (bar: median, whiskers: its 95% interval, tick: p99)", "")
    return fig


def _said(counts: Any, backend: str) -> str:
    """The race in words: "300 raced, 0 both, 0 lost"."""
    if backend not in counts.index or counts.at[backend, "races"] != counts.at[backend,
                                                                              "races"]:
        return ""
    r = counts.loc[backend]
    return f"{r['races']:,.0f} raced, {r['both']:,.0f} both, {r['lost']:,.0f} lost"
