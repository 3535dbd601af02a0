"""`growth` read back: per backend and trimming, the queue's peak and final entries and bytes,
each with its interval over the repeats (`summary`), and the figure: the queue's entries and
bytes over time, a line a backend (`draw`)."""

from __future__ import annotations

from typing import Any

from experiments.catalogue import CLEANUP


def _label(backend: str, trimming: Any) -> str:
    if backend in CLEANUP:  # a rival: its defaults, or its own cleanup setting
        cleaned = trimming is True or trimming == "True"
        return f"{backend}, {'its cleanup' if cleaned else 'defaults'}"
    if trimming is True or trimming == "True":
        return f"{backend}, trimmed"
    if trimming is False or trimming == "False":
        return f"{backend}, untrimmed"
    return backend


def summary(frame: Any) -> Any:
    """A row per backend and trimming: the queue's peak and final entries and KiB, each the
    median over the run's repeats, with its interval (`<column>_lo`, `<column>_hi`: a bootstrap
    over the repeats) where there are two or more, and `repeats`, how many it rests on. Each
    repeat's peak and end are its own: one repeat's last sample is not another's."""
    import pandas

    from experiments.readers.uncertainty import quantile

    samples = frame[frame["metric"].isin(["entries", "bytes"])]
    if "repeat" not in samples.columns:
        samples = samples.assign(repeat=0)
    runs: dict[tuple[Any, Any], list[dict[str, float]]] = {}
    for (backend, trimming, _), group in samples.groupby(["backend", "trimming", "repeat"],
                                                         dropna=False, sort=False):
        entries = group[group["metric"] == "entries"].sort_values("t_s")["value"]
        size = group[group["metric"] == "bytes"].sort_values("t_s")["value"]
        nothing = float("nan")
        runs.setdefault((backend, trimming), []).append({
            "peak_entries": entries.max() if len(entries) else nothing,
            "final_entries": entries.iloc[-1] if len(entries) else nothing,
            "peak_kib": size.max() / 1024 if len(size) else nothing,
            "final_kib": size.iloc[-1] / 1024 if len(size) else nothing,
        })
    out = []
    for (backend, trimming), repeats in runs.items():
        row: dict[str, Any] = {"backend": backend,
                               "trimming": "" if pandas.isna(trimming) else trimming}
        for column in GROWN:
            values = [r[column] for r in repeats if r[column] == r[column]]
            found = quantile(values, 0.5) if values else None
            row[column] = found.estimate if found else float("nan")
            row[f"{column}_lo"] = found.lo if found else float("nan")
            row[f"{column}_hi"] = found.hi if found else float("nan")
        row["repeats"] = len(repeats)
        out.append(row)
    totals = frame[frame["metric"] == "wakeups"].groupby("backend")["value"].first()
    table = pandas.DataFrame(out)
    table["wakeups"] = [totals.get(b, float("nan")) for b in table["backend"]]
    table["setting"] = [_setting(str(b), t) for b, t in
                        zip(table["backend"], table["trimming"], strict=True)]
    return table


#: What `summary` gives of each repeat, and then the median of.
GROWN = ("peak_entries", "final_entries", "peak_kib", "final_kib")


def _setting(backend: str, trimming: Any) -> str:
    """What a rival's row ran with: its defaults, or its cleanup setting."""
    if backend not in CLEANUP:
        return ""
    default, cleanup = CLEANUP[backend]
    return (cleanup or "") if trimming is True or trimming == "True" else default


#: The two panels of a row: (metric, unit, scale, where the log scale starts).
METRICS = (("entries", "entries", 1.0, 10.0), ("bytes", "KiB", 1 / 1024, 1.0))


def draw(frame: Any) -> Any:
    """The queue's entries and bytes over time, a line a backend (untrimmed dotted, hollow; a
    rival with its own cleanup setting dashed, hollow, as a rival's tuned setting is drawn
    everywhere), on a scale linear near zero and logarithmic above, so that a queue holding
    tens and one holding thousands both show; a row of panels per family where there are too
    many lines."""
    from experiments.readers.figures import figure, label, look, nothing, panels

    samples = frame[frame["metric"].isin([m for m, *_ in METRICS])]
    first = ""
    if "repeat" in samples.columns and samples["repeat"].nunique() > 1:
        # a line is one run's: repeats drawn as one would zigzag between them (the tables give
        # the median over repeats and its interval)
        earliest = samples.groupby(["backend", "trimming"], dropna=False)["repeat"].transform("min")
        samples = samples[samples["repeat"] == earliest]
        first = ", the first repeat"
    series = list(samples.groupby(["backend", "trimming"], dropna=False, sort=False).groups)
    groups = panels([b for b, _ in series], series=len(series)) or [("", [])]
    fig, axes = figure(columns=2, rows=len(groups), width=6.0,
                       height=4.2 if len(groups) == 1 else 3.4 if len(groups) <= 3 else 2.8)
    for row, (title, chosen) in zip(axes, groups, strict=True):
        for ax, (metric, unit, scale, linear) in zip(row, METRICS, strict=True):
            rows = samples[(samples["metric"] == metric) & samples["backend"].isin(chosen)]
            keys = rows.groupby(["backend", "trimming"], dropna=False, sort=False)
            for number, ((backend, trimming), group) in enumerate(keys):
                group = group.sort_values("t_s")
                cleaned = trimming is True or trimming == "True"
                if backend in CLEANUP:  # a rival: its defaults plain, its cleanup its variant
                    seen = look(str(backend), "cleanup" if cleaned else "default").line()
                else:
                    seen = look(str(backend)).line()
                    if trimming is False or trimming == "False":  # the stream left to grow
                        seen.update(linestyle=":", markerfacecolor="white")
                seen["label"] = _label(str(backend), trimming)
                # markers spaced alike but started apart, so lines lying on each other (the
                # small queues near zero) each show theirs; a short run's on every sample
                ax.plot(group["t_s"], group["value"] * scale, markersize=4, linewidth=1.3,
                        markevery=(number * 2 % 16, 16) if len(group) > 32 else None, **seen)
            heading = f"Queue {metric} while workflows wake repeatedly{first}"
            ax.set_title(f"{title}: queue {metric}{first}" if title else heading)
            if rows.empty:
                nothing(ax, f"no {metric} sampled for these backends")
                continue
            ax.set_ylim(bottom=0)
            if samples[samples["metric"] == metric]["value"].max() * scale > 50 * linear:
                ax.set_yscale("symlog", linthresh=linear)
                unit = f"{unit} (log scale above {linear:g})"
            label(ax, ax.get_title(), "seconds since the first submission", unit)
        handles, names = row[0].get_legend_handles_labels()
        for extra, name in zip(*row[1].get_legend_handles_labels(), strict=True):
            if name not in names:
                handles.append(extra)
                names.append(name)
        # beside the row, not on it: the small queues lie along the bottom, the stream's
        # growth across the middle
        row[1].legend(handles, names, loc="center left", bbox_to_anchor=(1.02, 0.5))
    for column in range(len(METRICS)):  # one scale down a column, so rows compare
        top = max(ax.get_ylim()[1] for ax in axes[:, column])
        if axes[0, column].get_yscale() == "symlog":  # headroom: a line ends at the peak
            top *= 2
        for ax in axes[:, column]:
            ax.set_ylim(0, top)
    return fig
