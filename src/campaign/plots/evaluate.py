"""Evaluation figures, each a function of a result's to_dict(): the confusion heatmap and the per-field match rates
of `campaign errors`, the paired seeds of `campaign seeds`. Each returns a matplotlib Figure, or None when the dict
lacks what the figure needs (an old record, another kind)."""
from __future__ import annotations

from typing import Any

from .canvas import figure, legend_outside, number

NAMED_CELLS = 25        # up to this many labels, each cell's count is written in it


def confusion(result: dict[str, Any], title: str | None = None) -> Any:
    """An errors result's confusion matrix (rows: gold, columns: predicted) as a heatmap, row-normalized (the share
    of each gold class), its counts written in the cells (up to NAMED_CELLS labels). `title`: the default names
    the accuracy and the examples."""
    labels, matrix = result.get("labels"), result.get("matrix")
    if not labels or not matrix or len(matrix) != len(labels):
        return None
    shares = result.get("matrix_normalized")
    if not shares or len(shares) != len(matrix):          # an old record: normalize the counts here
        shares = [[v / sum(row) if sum(row) else 0.0 for v in row] for row in matrix]
    k = len(labels)
    size = min(3 + 0.55 * k, 24)
    fig = figure(size + 1.2, size)
    ax = fig.add_subplot()
    im = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(k), labels=[str(v) for v in labels], rotation=45, ha="right")
    ax.set_yticks(range(k), labels=[str(v) for v in labels])
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    if title is None:
        ax.set_title(f"Confusion (row-normalized), accuracy {number(result.get('accuracy')):.3f}, "
                     f"n = {result.get('examples')}")
    else:
        ax.set_title(title, fontsize=10)
    if k <= NAMED_CELLS:
        for i, row in enumerate(matrix):
            for j, count in enumerate(row):
                if count:
                    ax.text(j, i, str(count), ha="center", va="center", fontsize=8,
                            color="white" if shares[i][j] > 0.5 else "black")
    fig.colorbar(im, ax=ax, label="share of the gold class")
    return fig


def fields(result: dict[str, Any], title: str | None = None) -> Any:
    """An extraction result's exact and normalized match rate per field, as horizontal bars."""
    if not isinstance(result.get("fields"), list):
        return None
    rows = [f for f in result["fields"] if isinstance(f, dict)]
    names = [str(f.get("field")) for f in rows]
    fig = figure(7, 1.5 + 0.35 * max(len(names), 1))
    ax = fig.add_subplot()
    y = list(range(len(names)))
    ax.barh([v + 0.2 for v in y], [number(f.get("normalized_rate")) for f in rows], height=0.4, label="normalized")
    ax.barh([v - 0.2 for v in y], [number(f.get("exact_rate")) for f in rows], height=0.4, label="exact")
    ax.set_yticks(y, labels=names)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("match rate over examples whose gold has the field")
    ax.set_ylabel("field")
    ax.set_title(title if title is not None else
                 f"Valid JSON {number(result.get('valid_json')):.1%}, all fields right "
                 f"{number(result.get('accuracy')):.1%}, n = {result.get('examples')}")
    legend_outside(ax)
    return fig


def seeds(result: dict[str, Any], title: str | None = None) -> Any:
    """A seeds result. Left: each seed's metric for both variants, joined per seed. Right: the differences with
    their mean, the t, bootstrap and (with per-example scores) crossed seeds x examples intervals, zero, the
    minimum useful effect and the band |difference| below it
    (not useful). `title`, when given, heads the figure."""
    d = [number(v) for v in result.get("differences") or []]
    if not d:
        return None
    fig = figure(11, 4.2)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1]})
    base, cand = result.get("baseline_values") or [], result.get("candidate_values") or []
    for a, b in zip(base, cand, strict=False):
        left.plot([0, 1], [a, b], color="0.6", lw=1, marker="o", ms=4)
    left.set_xticks([0, 1], labels=[str(result.get("baseline", "baseline")), str(result.get("candidate", "candidate"))])
    left.set_xlim(-0.4, 1.4)
    left.set_xlabel("variant (a line joins one seed's two runs)")
    left.set_ylabel(str(result.get("metric", "metric")))
    left.set_title(f"{result.get('n_seeds', len(d))} seeds, paired")
    jitter = [0.04 * ((i % 7) - 3) for i in range(len(d))]
    effect = number(result.get("min_effect"))
    if effect > 0:
        right.axhspan(-effect, effect, color="#dddddd", label=f"|effect| < {effect:g} (not useful)")
    right.scatter(jitter, d, color="0.4", s=18, zorder=3, label="per seed")
    right.axhline(0, color="0.2", lw=0.8)
    if effect:
        right.axhline(effect, color="tab:green", ls="--", lw=1, label=f"min effect {effect:g}")
    mean = number(result.get("mean_diff"), sum(d) / len(d))
    right.plot([0.5], [mean], "o", color="tab:blue", zorder=4)
    boot = result.get("bootstrap")
    if not isinstance(boot, dict):
        boot = {}
    crossed = result.get("crossed")
    if not isinstance(crossed, dict):
        crossed = {}
    for x, lo, hi, label, color in ((0.5, result.get("ci_low"), result.get("ci_high"), "t interval", "tab:blue"),
                                    (0.7, boot.get("low"), boot.get("high"),
                                     f"bootstrap ({boot.get('method')})", "tab:orange"),
                                    (0.9, crossed.get("low"), crossed.get("high"),
                                     "seeds x examples (crossed)", "tab:red")):
        if lo is not None or hi is not None:
            ylo = lo if lo is not None else min(d)
            yhi = hi if hi is not None else max(d)
            right.plot([x, x], [ylo, yhi], color=color, lw=3, label=label)
    right.set_xticks([])
    right.set_xlim(-0.4, 1.1)
    right.set_xlabel("seeds (dots, spread sideways), mean and intervals")
    sign = "candidate - baseline" if result.get("higher_is_better", True) else "baseline - candidate"
    right.set_ylabel(f"difference ({sign})")
    right.set_title(f"{result.get('verdict')}: mean {mean:+.4g}")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    if title is not None:
        fig.suptitle(title, fontsize=10)
    return fig


__all__ = ["NAMED_CELLS", "confusion", "fields", "seeds"]
