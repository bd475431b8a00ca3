"""Figures of plans and variants, each a function of a result's to_dict(): a budget's schedule as a Gantt chart, an
unreplicated ablation's half-normal plot of its effects, a quantization comparison's memory against quality. Each
returns a matplotlib Figure, or None when the dict lacks what the figure needs."""
from __future__ import annotations

from typing import Any

from .canvas import figure, label_inside, number

MiB = 2**20


def gantt(schedule: dict[str, Any], title: str = "", *, window: float | None = None, label: str | None = None,
          setup_hours: float = 0.0) -> Any:
    """A schedule's (a budget's `schedule`) every run as a bar on the card slots it holds, coloured by phase; where
    the package ends (hours: 168 for a 7-day package), when given, as a dashed line named in the legend (label, by
    default 'rental window: 168 h') and the time past it shaded, so the runs past the package (a package topped
    up on demand, or a schedule that outruns it) show. setup_hours: the set-up billed before the first step, drawn
    hatched on every card from 0, the runs after it (the time axis is the rental's, from its start)."""
    runs = [r for r in schedule.get("runs") or [] if isinstance(r, dict)]
    if not runs:
        return None
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    setup = number(setup_hours)
    setup = setup if 0 < setup < float("inf") else 0.0      # a bad record's set-up is not drawn
    cards = max(1, int(schedule.get("cards") or 1))
    phases = list(dict.fromkeys(str(r.get("phase")) for r in runs))
    palette = colormaps["tab10"]
    colors = {p: palette(i % 10) for i, p in enumerate(phases)}
    fig = figure(10, 1 + 0.5 * cards, layout="tight")
    ax = fig.add_subplot()
    for r in runs:
        start, end = float(r.get("start_hours", 0)), float(r.get("end_hours", 0))   # a bad record raises
        for c in r.get("cards") or [0]:
            ax.barh(c, end - start, left=start + setup, color=colors[str(r.get("phase"))], edgecolor="white")
    handles: list[Any] = [Rectangle((0, 0), 1, 1, color=colors[p]) for p in phases]
    names = list(phases)
    if setup > 0:
        for c in range(cards):
            ax.barh(c, setup, left=0, color="lightgrey", hatch="//", edgecolor="grey")
        handles.append(Rectangle((0, 0), 1, 1, facecolor="lightgrey", hatch="//", edgecolor="grey"))
        names.append(f"set-up: {setup:,.4g} h billed before the first step")
    if window is not None:
        right = max([window] + [float(r.get("end_hours", 0)) + setup for r in runs])
        ax.axvspan(window, max(right, window * 1.05), color="tab:red", alpha=0.12, linewidth=0, zorder=0)
        handles.append(ax.axvline(window, color="black", linestyle="--", linewidth=1))
        names.append(label or f"rental window: {window:,.4g} h")
    ax.set_yticks(range(cards), [f"card {i}" for i in range(cards)])
    ax.invert_yaxis()
    ax.set_xlabel("hours from the start of the rental")
    ax.set_ylabel("card slot")
    ax.set_title(title)
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return fig


def half_normal(result: dict[str, Any], title: str | None = None) -> Any:
    """An unreplicated two-level ablation (an analysis's `half_normal` points, Daniel 1959): each effect's |estimate|
    against the half-normal quantile of its rank, labelled with its name; the line through the origin of slope
    Lenth's PSE (where null effects lie); Lenth's margin of error ME = t(1 - alpha/2; d) PSE and simultaneous
    margin SME = t(gamma; d) PSE, gamma = (1 + (1 - alpha)^(1/m)) / 2, d = m / 3 (Lenth 1989), as labelled
    horizontal lines: an effect above SME is active even counting the m effects looked at."""
    points = [p for p in result.get("half_normal") or [] if isinstance(p, dict)]
    if not points:
        return None
    from scipy import stats

    qs = [number(p.get("quantile")) for p in points]
    ys = [number(p.get("abs_estimate")) for p in points]
    pse = number(result.get("pse"))
    m = len(points)
    alpha = 1 - number(result.get("confidence", 0.95))
    me, sme = lenth_margins(pse, m, alpha, stats)
    fig = figure(6.4, 4.6)
    ax = fig.add_subplot()
    colours = ["tab:red" if y > sme else "tab:orange" if y > me else "tab:blue" for y in ys]
    ax.scatter(qs, ys, c=colours, zorder=3)
    xmid = (min(qs) + max(qs)) / 2
    for p, x, y in zip(points, qs, ys, strict=True):
        label_inside(ax, str(p.get("effect")), (x, y), xmid, fontsize=8)
    top = max(qs) * 1.1
    ax.plot([0, top], [0, pse * top], color="tab:gray", linewidth=1, label=f"null effects: slope PSE {pse:,.4g}")
    for value, name, style in ((me, "ME", ":"), (sme, "SME", "--")):
        ax.axhline(value, color="black", linestyle=style, linewidth=1, label=f"{name} {value:,.4g}")
        ax.annotate(f"{name} = {value:,.4g}", (0, value), xycoords=("axes fraction", "data"), xytext=(3, 2),
                    textcoords="offset points", ha="left", va="bottom", fontsize="small")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0, top=max(ys + [sme]) * 1.12)
    ax.set_xlabel("half-normal quantile of the rank")
    ax.set_ylabel(f"|effect| on {result.get('metric', 'the metric')}")
    if title is None:
        title = (f"half-normal plot of {m} effects (Lenth: PSE {pse:,.4g}, {1 - alpha:.0%} ME and SME)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(True, alpha=0.3)
    return fig


def lenth_margins(pse: float, m: int, alpha: float, stats: Any) -> tuple[float, float]:
    """Lenth's (1989) margin of error and simultaneous margin of error of m effects: t quantiles on d = m / 3
    degrees of freedom times the PSE (15 effects, alpha 0.05: 2.57 and 5.22 PSE)."""
    d = m / 3
    gamma = (1 + (1 - alpha) ** (1 / m)) / 2
    return float(stats.t.ppf(1 - alpha / 2, d) * pse), float(stats.t.ppf(gamma, d) * pse)


def quant(result: dict[str, Any], title: str | None = None) -> Any:
    """A quantization comparison: each variant's stored weight bytes (from zero) against its change in quality from
    the reference (the reference at 0, its quality named), with the paired interval of that change; flagged
    variants (a guard broke) in red and named so, the reference in grey. Perplexity changes are in percent of the
    reference's, the interval of the paired t on per-example mean NLL as exp(d) - 1 (examples weighted equally);
    accuracy changes in points, the interval recorded, else the Wald interval of a paired difference from the flips
    (right to wrong b, wrong to right c, n examples: (c - b) / n +/- 1.96 sqrt(b + c - (c - b)^2 / n) / n). The
    change axis spans at least +/- 1 (percent or point), so a change within noise does not fill the plot.
    `title`: the default names the model, the examples, the reference and the device."""
    import math

    variants = [v for v in result.get("variants") or [] if isinstance(v, dict)]
    if not variants:
        return None
    metric = str(result.get("metric", "quality"))
    perplexity = metric == "perplexity"
    ref = next((v for v in variants if v.get("status") == "reference"), variants[0])
    ref_quality = number(ref.get("quality"), math.nan)
    evaluation = result.get("evaluation") if isinstance(result.get("evaluation"), dict) else {}
    n = number((evaluation or {}).get("examples"), 0.0)
    fig = figure(6.4, 4.2)
    ax = fig.add_subplot()
    stored = [number(v.get("weight_bytes_stored")) for v in variants]
    unit, div = ("GiB", 2 ** 30) if max(stored) >= 2 ** 30 else ("MiB", MiB)
    xs = [size / div for size in stored]
    xmid = (min(xs) + max(xs)) / 2
    reach = 1.0
    for v, x in zip(variants, xs, strict=True):
        y, low, high = _quant_change(v, v is ref, ref_quality, perplexity, n)
        if not math.isfinite(y):
            continue
        flagged = v.get("status") == "flagged"
        colour = "tab:red" if flagged else ("tab:gray" if v is ref else "tab:blue")
        if low is not None and high is not None:
            ax.errorbar([x], [y], yerr=[[max(0.0, y - low)], [max(0.0, high - y)]], color=colour, capsize=4,
                        fmt="o", zorder=3)
            reach = max(reach, abs(low), abs(high))
        else:
            ax.scatter([x], [y], color=colour, zorder=3)
        reach = max(reach, abs(y))
        label_inside(ax, str(v.get("name")) + (" (flagged)" if flagged else ""), (x, y), xmid, fontsize=9)
    ax.axhline(0, color="tab:gray", linewidth=0.8)
    ax.set_ylim(-1.25 * reach, 1.25 * reach)
    ax.set_xlim(0, max(xs) * 1.3 if max(xs) > 0 else 1)
    ax.set_xlabel(f"weights stored ({unit})")
    what = f"{ref.get('name')} {metric} {ref_quality:.4g}" if math.isfinite(ref_quality) else str(ref.get("name"))
    ax.set_ylabel(f"perplexity change (% of {what};\nlower is better)" if perplexity else
                  f"{metric} accuracy change (points;\nreference {what})")
    if title is None:
        title = (f"{result.get('model')}: memory against quality, with paired intervals\n"
                 f"{(evaluation or {}).get('examples')} examples, reference {result.get('reference')}, on "
                 f"{result.get('device')}")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    return fig


def _quant_change(v: dict[str, Any], is_ref: bool, ref_quality: float, perplexity: bool,
                  n: float) -> tuple[float, float | None, float | None]:
    """A variant's change against the reference and its interval, in the figure's units (see quant)."""
    import math

    if is_ref:
        return 0.0, None, None
    delta = number(v.get("delta"), number(v.get("quality"), math.nan) - ref_quality)
    interval = v.get("interval")
    bounds = [number(b, math.nan) for b in interval] if isinstance(interval, list) and len(interval) == 2 else None
    if perplexity:
        y = 100 * delta / ref_quality if ref_quality else math.nan
        if bounds and all(map(math.isfinite, bounds)):
            return y, 100 * math.expm1(bounds[0]), 100 * math.expm1(bounds[1])
        return y, None, None
    y = 100 * delta
    if bounds and all(map(math.isfinite, bounds)):
        return y, 100 * bounds[0], 100 * bounds[1]
    flips = v.get("flips")
    if isinstance(flips, list) and len(flips) == 2 and n > 0:
        b, c = number(flips[0]), number(flips[1])
        half = 1.96 * math.sqrt(max(0.0, b + c - (c - b) ** 2 / n)) / n
        return y, 100 * ((c - b) / n - half), 100 * ((c - b) / n + half)
    return y, None, None


__all__ = ["gantt", "half_normal", "lenth_margins", "quant"]
