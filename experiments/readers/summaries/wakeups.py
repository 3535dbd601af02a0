"""`wakeups` read back: per backend, the wakeups raced against a running pass and the share
lost with its interval, and for a rival what it refused (`summary`), a share in words
(`share`), and the figure: a bar a backend, raced and lost (`draw`)."""

from __future__ import annotations

from typing import Any

from experiments.catalogue import KEYS


def summary(frame: Any) -> Any:
    """Races and lost wakeups per backend, the share lost with its interval (`lost_share_lo`,
    `lost_share_hi`: `uncertainty.proportion`, so none lost of 300 still says how many could
    have been); for a rival, the enqueues it refused and how the poke was enqueued (`KEYS`)."""
    from experiments.readers.uncertainty import proportion

    table = frame.pivot_table(index="backend", columns="metric", values="value", aggfunc="sum",
                              sort=False).reset_index()
    if "refused" not in table:
        table["refused"] = float("nan")
    shares = [proportion(lost, races) for lost, races in zip(table["lost"], table["races"],
                                                             strict=True)]
    table["lost_share"] = [i.estimate for i in shares]
    table["lost_share_lo"] = [i.lo for i in shares]
    table["lost_share_hi"] = [i.hi for i in shares]
    table["how"] = [KEYS[b][2] if b in KEYS else "" for b in table["backend"]]
    return table[["backend", "races", "lost", "lost_share", "lost_share_lo", "lost_share_hi",
                  "refused", "how"]]


def share(found: Any) -> str:
    """A share lost with its interval, as the figure and the tables say it: "at most 1.3%"
    where none was lost, else "74-84%" (an en dash)."""
    lo, hi = found.lo, found.hi
    if hi != hi:
        return ""
    if found.estimate == 0:
        return f"at most {hi:.1%}"
    digits = 0 if hi - lo >= 0.02 else 1

    def shown(value: float) -> str:
        return "0" if value == 0 else "100" if value == 1 else f"{value * 100:.{digits}f}"

    return f"{shown(lo)}\N{EN DASH}{shown(hi)}%"


def draw(frame: Any) -> Any:
    """A bar a backend, family by family: the wakeups that raced a pass (pale), the ones lost
    over it (solid) with the interval of how many could have been (whiskers), and the count in
    words at its end."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from experiments.readers.figures import figure, label, look, nothing, order
    from experiments.readers.uncertainty import LEVEL, Interval

    table = summary(frame)
    names = order(table["backend"])
    table = table.set_index("backend").reindex(names)
    fig, axes = figure(width=7.5, height=1.4 + 0.38 * max(len(names), 3))
    ax = axes[0][0]
    if not names:
        nothing(ax, "no wakeup races in this run")
        return fig
    for i, backend in enumerate(names):
        seen = look(backend)
        races, lost, refused = (float(table.at[backend, c]) for c in ("races", "lost",
                                                                       "refused"))
        if races != races:  # no races measured: say so rather than draw a zero
            ax.annotate("not measured", (0, i), xytext=(4, 0), textcoords="offset points",
                        va="center", color="#888888")
            continue
        ax.barh(i, races, height=0.6, color=seen.colour, alpha=0.3, edgecolor=seen.colour)
        if lost == lost and lost > 0:
            ax.barh(i, lost, height=0.6, color=seen.colour)
        found = Interval(float(table.at[backend, "lost_share"]),
                         float(table.at[backend, "lost_share_lo"]),
                         float(table.at[backend, "lost_share_hi"]), int(races))
        if found.hi == found.hi:  # how many could have been lost: the share's interval
            ax.errorbar([lost], [i], xerr=[[lost - found.lo * races], [found.hi * races - lost]],
                        fmt="none", ecolor="black", elinewidth=1, capsize=3)
        words = "none lost" if lost == 0 else f"{lost:,.0f} lost" if lost == lost else "lost: ?"
        if found.hi == found.hi:
            words += f" ({share(found)})"
        if refused == refused:  # a rival's: its key turned the poke away (`KEYS`)
            words += f", {refused:,.0f} refused" if refused else ", none refused"
        ax.annotate(f"{races:,.0f} raced, {words}", (races, i), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8)
    # a rival's name with the key it was poked under, the one thing that decides its count
    ax.set_yticks(range(len(names)), [f"{b} ({KEYS[b][1]})" if b in KEYS else b for b in names])
    ax.set_ylim(len(names) - 0.5, -0.5)
    # room for the words at the bars' ends (a rival's say what it refused too)
    ax.margins(x=0.5 if table["refused"].notna().any() else 0.3)
    ax.set_xlim(left=0)
    ax.grid(axis="y", visible=False)
    label(ax, "Wakeups that landed mid-pass, and how many were lost", "wakeups", "")
    fig.legend(handles=[Patch(facecolor="#555555", alpha=0.3, edgecolor="#555555",
                              label="raced against a pass"),
                        Patch(facecolor="#555555", label="lost (none drawn where none was)"),
                        Line2D([], [], color="black", marker="|", markersize=8, linewidth=1,
                               label=f"lost: {LEVEL:.0%} interval")],
               loc="outside lower center", ncol=3)
    return fig
