"""The soak read back (`python -m experiments soak` writes it): the soak page's table from its
metadata, each store's first, last and most of every sample with the RSS slope (`table`), the
same from its rows, every measure (`summary`), and the figure: a row a measure, a column a
store, the faults marked (`draw`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure


def table(meta: dict[str, Any]) -> str:
    """The soak page's table from `soak.json`: each store's first and last sample of the soak
    (arrivals running) and the most it reached, the RSS slope per hour over the second half,
    and what the queue held once the arrivals stopped and it drained."""

    def cell(summary: dict[str, Any], metric: str, digits: int = 0) -> str:
        found = summary.get(metric)
        if found is None:
            return "—"
        return (f"{found['start']:,.{digits}f} → {found['end']:,.{digits}f} "
                f"(most {found['max']:,.{digits}f})")

    def slope(summary: dict[str, Any], metric: str) -> str:
        found = (summary.get(metric) or {}).get("slope_per_hour_second_half")
        return "—" if found is None else f"{found:+.1f}"

    lines = ["| store | completed | faults | RSS MiB | RSS MiB/h, 2nd half | descriptors | "
             "connections | server's clients | queue |", "|---|---|---|---|---|---|---|---|---|"]
    for name, store in meta["stores"].items():
        summary = store.get("summary", {})
        if "error" in store:
            lines.append(f"| {name} | failed: {store['error']} | | | | | | | |")
            continue
        left = (store.get("after_drain") or {}).get("queue")
        drained = "" if left is None else f", {left:,} after the drain"
        lines.append(
            f"| {name} | {store.get('completed', 0):,} / {store.get('submitted', 0):,} | "
            f"{len(store.get('faults', []))} | {cell(summary, 'rss', 1)} | "
            f"{slope(summary, 'rss')} | {cell(summary, 'fds')} | "
            f"{cell(summary, 'connections')} | {cell(summary, 'server_clients')} | "
            f"{cell(summary, 'queue')}{drained} |")
    return "\n".join(lines)


def summary(frame: pandas.DataFrame) -> pandas.DataFrame:
    """Per store (backend and variant) and measure, from its samples: the first and last, the
    least and most, the least-squares slope per hour over the second half of the samples'
    span (what says flat or growing) and the count of samples; as the soak summarised each
    store in its metadata when it ended (a store as it is is variant `default`). The faults
    are events, not samples: left out."""
    import numpy
    import pandas

    columns = ["backend", "variant", "metric", "unit", "start", "end", "min", "max",
               "slope_per_hour", "samples"]
    sampled = frame[frame["metric"] != "fault"]
    rows = []
    for (backend, variant, metric), group in sampled.groupby(
            ["backend", "variant", "metric"], sort=False, dropna=False):
        part = group.sort_values("t_s", kind="stable")
        t = part["t_s"].to_numpy(dtype=float)
        v = part["value"].to_numpy(dtype=float)
        second = t >= t[-1] / 2
        rows.append({"backend": backend,
                     "variant": "default" if variant != variant else variant,
                     "metric": metric, "unit": part["unit"].iloc[0], "start": v[0],
                     "end": v[-1], "min": v.min(), "max": v.max(),
                     "slope_per_hour": _slope(t[second], v[second]), "samples": len(v)})
    found = pandas.DataFrame(rows, columns=columns)
    # a store as it is before its variants (the readers then put the stores in their order)
    found = found.iloc[numpy.argsort((found["variant"] != "default").to_numpy(),
                                     kind="stable")].reset_index(drop=True)
    found["slope_per_hour"] = numpy.round(found["slope_per_hour"].astype(float), 3)
    return found


def _slope(t: Any, v: Any) -> float:
    """The least-squares slope of the points, per hour; NaN under three points or no spread
    in time."""
    if len(t) < 3:
        return float("nan")
    spread = ((t - t.mean()) ** 2).sum()
    if spread == 0:
        return float("nan")
    return float(((t - t.mean()) * (v - v.mean())).sum() / spread * 3600)


def draw(frame: pandas.DataFrame) -> Figure:
    """A row per measure, a column per backend (a rerun dashed in its backend's column), one
    scale along a row: four stores' spikes on one axis hid one another."""
    from experiments.readers.figures import figure, look, order

    panels = (("rss", "worker RSS", "MiB"), ("fds", "worker's open descriptors", "descriptors"),
              ("connections", "worker's sockets to its server", "sockets"),
              ("server_clients", "server's clients (worker + API)", "clients"),
              ("queue", "queue length", "workflows"),
              ("in_flight", "submitted, not yet completed", "workflows"))
    backends = order(frame["backend"]) or ["(none)"]
    fig, axes = figure(columns=len(backends), rows=len(panels), width=3.4 if len(backends) > 1
                       else 6.0, height=1.9, sharex=True, sharey="row")
    faults = frame[frame["metric"] == "fault"]
    for row, (metric, title, unit) in zip(axes, panels, strict=True):
        part = frame[frame["metric"] == metric]
        for ax, backend in zip(row, backends, strict=True):
            mine = part[part["backend"] == backend]
            for variant, rows in mine.groupby("variant", sort=False, dropna=False):
                rows = rows.sort_values("t_s")
                seen = look(backend, variant)
                # no markers: the column names the backend, and a spiky series is all marker
                ax.plot(rows["t_s"] / 60, rows["value"], linewidth=0.9, color=seen.colour,
                        linestyle=seen.dashes, alpha=0.7 if seen.hollow else 1.0)
            struck = faults[faults["backend"] == backend]
            ax.plot(struck["t_s"] / 60, [0] * len(struck), linestyle="none", marker="|",
                    color="#555555", markersize=5)
            if mine.empty:
                ax.text(0.5, 0.5, "no samples", ha="center", va="center", color="#666666",
                        transform=ax.transAxes)
        values = part["value"]
        top = float(values.max()) if len(values) else 1.0
        row[0].set_ylim(0, top * 1.05 if top > 0 else 1.0)  # the row's scale, from zero
        row[0].set_ylabel(f"{title}\n({unit})", fontsize=8)
    for ax, backend in zip(axes[0], backends, strict=True):
        reruns = sorted({str(v) for v in frame[frame["backend"] == backend]["variant"].dropna()
                         if str(v) not in ("", "default")})
        also = f"\n(dashed: {', '.join(reruns)})" if reruns else ""
        ax.set_title(f"{backend}{also}", color=look(backend).colour)
    for ax in axes[-1]:
        ax.set_xlabel("minutes into the soak (| a fault)")
    return fig
