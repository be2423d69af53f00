"""Run statistics (``stats.json``) and the one-page report (``report.png``).

:class:`RunStats` accumulates what a run did, batch by batch: documents in,
kept and dropped by reason, skipped bad records, bytes, PII replacements by
type, the cleaner's and quality filter's counters, length histograms before and
after, per-group outcomes (``--group-by``) and throughput.  It is
JSON-serialisable (``state()`` / ``RunStats.from_state``) so a resumed run
continues the counts of the committed part of the run, and the final numbers
are those of an uninterrupted run (timings aside).

Example:
    >>> s = RunStats()
    >>> s.add_batch(n_in=3, kept=2, reasons={"duplicate": 1}, bytes_in=30, bytes_out=20)
    >>> s.to_json()["documents"]
    {'input': 3, 'kept': 2, 'dropped': 1, 'skipped_bad_records': 0}
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, Iterable, List, Optional

import numpy as np

from .._durable import atomic_replace
from ..stages import reason_name

__all__ = ["RunStats", "render_report", "LENGTH_EDGES", "length_histogram", "format_summary", "reason_counts"]

#: bin edges of the length histograms, in bytes: 0, then quarter octaves 1 .. 2^30
LENGTH_EDGES = np.array([0.0] + [2.0 ** (k / 4) for k in range(0, 4 * 30 + 1)])


def length_histogram(lengths: np.ndarray) -> np.ndarray:
    """Counts of ``lengths`` (bytes) in the bins of LENGTH_EDGES (last bin open)."""
    idx = np.searchsorted(LENGTH_EDGES, np.asarray(lengths, dtype=np.float64), side="right") - 1
    np.clip(idx, 0, len(LENGTH_EDGES) - 1, out=idx)
    return np.bincount(idx, minlength=len(LENGTH_EDGES)).astype(np.int64)


def _add(d: Dict[str, int], other: Dict[str, Any]) -> None:
    for k, v in other.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            d[k] = d.get(k, 0) + v


OTHER_GROUP = "(other)"


def _fold_groups(groups: Dict[str, Dict[str, int]], keep: int) -> int:
    """Keeps the ``keep`` largest groups (by documents) and adds the others' counts to
    OTHER_GROUP, in place; returns how many groups were folded."""
    ranked = sorted(((k, v) for k, v in groups.items() if k != OTHER_GROUP), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    if len(ranked) <= keep:
        return 0
    other = groups.setdefault(OTHER_GROUP, {})
    for k, v in ranked[keep:]:
        _add(other, v)
        del groups[k]
    return len(ranked) - keep


def _top_groups(groups: Dict[str, Dict[str, int]], top: int) -> List[Any]:
    """(name, outcome) of the ``top`` largest groups, largest first, then one
    "(other N)" entry (N groups; "N+" when groups were folded during the run) with the rest (and OTHER_GROUP) summed."""
    ranked = sorted(((k, v) for k, v in groups.items() if k != OTHER_GROUP), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    head, rest = ranked[:top], ranked[top:]
    other: Dict[str, int] = {}
    for _, v in rest:
        _add(other, v)
    if OTHER_GROUP in groups:
        _add(other, groups[OTHER_GROUP])
    if other:
        head.append((f"(other {len(rest)}{'+' if OTHER_GROUP in groups else ''})", other))
    return head


class RunStats:
    """What a run did; see the module docstring.

    Per-group outcomes are bounded: at most MAX_GROUPS groups are counted by
    name; when more appear, all but the MAX_GROUPS // 2 largest are folded into
    the "(other)" group (totals stay exact; a folded group that appears again
    starts a new count).  The summary and report show the largest groups and
    one "other" line."""

    MAX_GROUPS = 1000

    def __init__(self) -> None:
        self.docs_in = 0
        self.docs_kept = 0
        self.skipped = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.dropped: Dict[str, int] = {}
        self.pii: Dict[str, int] = {}
        self.cleaner: Dict[str, int] = {}
        self.quality: Dict[str, int] = {}
        self.input_repairs: Dict[str, int] = {}
        self.groups: Dict[str, Dict[str, int]] = {}
        self.groups_folded = 0
        self.hist_in = np.zeros(len(LENGTH_EDGES), dtype=np.int64)
        self.hist_out = np.zeros(len(LENGTH_EDGES), dtype=np.int64)
        self.elapsed_before = 0.0      # seconds of earlier (committed) runs
        self.runs = 1
        self.series: List[List[float]] = []  # [elapsed s, docs in, bytes in], thinned
        self._t0 = time.perf_counter()
        self.meta: Dict[str, Any] = {}

    # ------------------------------------------------------------- updates
    def elapsed(self) -> float:
        return self.elapsed_before + (time.perf_counter() - self._t0)

    def add_batch(self, n_in: int, kept: int, reasons: Dict[str, int], bytes_in: int, bytes_out: int,
                  hist_in: Optional[np.ndarray] = None, hist_out: Optional[np.ndarray] = None,
                  counters: Optional[Dict[str, Dict[str, int]]] = None, skipped: int = 0,
                  groups: Optional[Dict[str, Dict[str, int]]] = None) -> None:
        """Adds one batch's numbers (``reasons``: dropped documents by reason name)."""
        self.docs_in += int(n_in)
        self.docs_kept += int(kept)
        self.skipped += int(skipped)
        self.bytes_in += int(bytes_in)
        self.bytes_out += int(bytes_out)
        _add(self.dropped, reasons)
        if hist_in is not None:
            self.hist_in += hist_in
        if hist_out is not None:
            self.hist_out += hist_out
        if counters:
            _add(self.pii, counters.get("pii", {}))
            _add(self.cleaner, counters.get("cleaner", {}))
            _add(self.quality, counters.get("quality", {}))
            _add(self.input_repairs, counters.get("input", {}))
        for g, outcome in (groups or {}).items():
            _add(self.groups.setdefault(g, {}), outcome)
        if len(self.groups) > self.MAX_GROUPS + 1:
            self.groups_folded += _fold_groups(self.groups, self.MAX_GROUPS // 2)
        self._sample()

    def add_counts(self, reasons: Dict[str, int], counters: Optional[Dict[str, Dict[str, int]]] = None) -> None:
        """Adds dropped documents by reason and the stages' counters of batches already counted
        by ``add_batch`` (a run adds these once a commit, not once a batch; no series point)."""
        _add(self.dropped, reasons)
        if counters:
            _add(self.pii, counters.get("pii", {}))
            _add(self.cleaner, counters.get("cleaner", {}))
            _add(self.quality, counters.get("quality", {}))
            _add(self.input_repairs, counters.get("input", {}))

    def add_skipped(self, n: int) -> None:
        self.skipped += int(n)

    def _sample(self) -> None:
        self.series.append([round(self.elapsed(), 4), self.docs_in, self.bytes_in])
        if len(self.series) > 2000:  # keep the plot's data small: every other point
            self.series = self.series[::2]

    # ------------------------------------------------------------ state
    def state(self) -> Dict[str, Any]:
        """JSON-serialisable state (for ``commit(extra=...)``)."""
        return {"docs_in": self.docs_in, "docs_kept": self.docs_kept, "skipped": self.skipped,
                "bytes_in": self.bytes_in, "bytes_out": self.bytes_out, "dropped": dict(self.dropped),
                "pii": dict(self.pii), "cleaner": dict(self.cleaner), "quality": dict(self.quality),
                "input_repairs": dict(self.input_repairs), "groups": {k: dict(v) for k, v in self.groups.items()},
                "groups_folded": self.groups_folded, "hist_in": _sparse(self.hist_in), "hist_out": _sparse(self.hist_out),
                "elapsed": self.elapsed(), "runs": self.runs, "series": [list(p) for p in self.series],
                "meta": dict(self.meta)}

    @classmethod
    def from_state(cls, st: Dict[str, Any]) -> "RunStats":
        s = cls()
        for k in ("docs_in", "docs_kept", "skipped", "bytes_in", "bytes_out"):
            setattr(s, k, int(st[k]))
        for k in ("dropped", "pii", "cleaner", "quality", "input_repairs"):
            setattr(s, k, dict(st.get(k, {})))
        s.groups = {k: dict(v) for k, v in st.get("groups", {}).items()}
        s.groups_folded = int(st.get("groups_folded", 0))
        s.hist_in = _dense(st["hist_in"])
        s.hist_out = _dense(st["hist_out"])
        s.elapsed_before = float(st.get("elapsed", 0.0))
        s.runs = int(st.get("runs", 1)) + 1
        s.series = [list(p) for p in st.get("series", [])]
        s.meta = dict(st.get("meta", {}))
        return s

    # ------------------------------------------------------------- output
    def to_json(self) -> Dict[str, Any]:
        """The content of stats.json."""
        dropped = sum(self.dropped.values())
        el = max(self.elapsed(), 1e-9)
        by_reason = dict(sorted(self.dropped.items(), key=lambda kv: (-kv[1], kv[0])))
        stages = {"cleaner": 0, "quality": 0, "dedup": 0}
        if "near_dup" in self.meta or "near_duplicate" in self.dropped:
            stages["near_dup"] = 0
        for r, n in self.dropped.items():
            stages["dedup" if r == "duplicate" else "near_dup" if r == "near_duplicate" else
                   "cleaner" if r in ("empty", "too_large") else "quality"] += n
        out = {
            "documents": {"input": self.docs_in, "kept": self.docs_kept, "dropped": dropped,
                          "skipped_bad_records": self.skipped},
            "kept_fraction": self.docs_kept / self.docs_in if self.docs_in else 0.0,
            "dropped_by_reason": by_reason,
            "dropped_by_stage": stages,
            "bytes": {"input": self.bytes_in, "output": self.bytes_out},
            "pii_replacements": dict(self.pii),
            "cleaner": dict(self.cleaner),
            "quality": dict(self.quality),
            "input_repairs": dict(self.input_repairs),
            "length_histogram": {"unit": "bytes", "edges": [round(float(e), 3) for e in LENGTH_EDGES],
                                 "input": self.hist_in.tolist(), "kept": self.hist_out.tolist()},
            "throughput": {"seconds": round(el, 3), "docs_per_s": round(self.docs_in / el, 1),
                           "mb_per_s": round(self.bytes_in / el / 1e6, 2), "runs": self.runs,
                           "series": {"columns": ["seconds", "documents", "bytes"], "rows": self.series}},
        }
        if self.groups:
            out["by_group"] = {"field": self.meta.get("group_by", ""),
                               "groups": {k: dict(sorted(v.items())) for k, v in sorted(self.groups.items())},
                               "max_groups": self.MAX_GROUPS, "groups_folded_into_other": self.groups_folded}
        out.update({k: v for k, v in self.meta.items() if k in ("inputs", "output", "config", "threads", "version",
                                                                 "near_dup")})
        return out


def reason_counts(reasons: np.ndarray, names: Dict[int, str]) -> Dict[str, int]:
    """The dropped documents of a batch per reason name (``reasons``: one code a document, 0 = kept,
    left out); ``names`` caches code -> name across batches (filled here)."""
    codes, counts = np.unique(reasons, return_counts=True)
    dropped: Dict[str, int] = {}
    for c, k in zip(codes.tolist(), counts.tolist()):
        if c:
            dropped[names.setdefault(c, reason_name(c))] = k
    return dropped


def _sparse(h: np.ndarray) -> Dict[str, int]:
    return {str(i): int(v) for i, v in enumerate(h.tolist()) if v}


def _dense(d: Dict[str, int]) -> np.ndarray:
    h = np.zeros(len(LENGTH_EDGES), dtype=np.int64)
    for i, v in d.items():
        h[int(i)] = int(v)
    return h


# ---------------------------------------------------------------- summary text
def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"


def format_summary(stats: Dict[str, Any], top: int = 12) -> str:
    """A plain-text table of a stats.json dict (what ``run`` and ``demo`` print)."""
    d = stats["documents"]
    n = max(d["input"], 1)
    th = stats["throughput"]
    lines = [f"documents  {d['input']:>10,} in   {d['kept']:>10,} kept ({100 * d['kept'] / n:.1f} %)   "
             f"{d['dropped']:>10,} dropped" + (f"   {d['skipped_bad_records']:,} bad records skipped"
                                                if d["skipped_bad_records"] else ""),
             f"bytes      {_human_bytes(stats['bytes']['input']):>10} in   {_human_bytes(stats['bytes']['output']):>10} out",
             f"time       {th['seconds']:>10.1f} s    {th['docs_per_s']:>10,.0f} docs/s   {th['mb_per_s']:.1f} MB/s"
             + (f"   ({th['runs']} runs: resumed)" if th.get("runs", 1) > 1 else ""), ""]
    lines.append(f"{'dropped by reason':<44}{'documents':>12}{'share':>9}")
    items = list(stats["dropped_by_reason"].items())
    for r, c in items[:top]:
        lines.append(f"  {r:<42}{c:>12,}{100 * c / n:>8.1f}%")
    if len(items) > top:
        rest = sum(c for _, c in items[top:])
        lines.append(f"  {'(' + str(len(items) - top) + ' more rules)':<42}{rest:>12,}{100 * rest / n:>8.1f}%")
    nd = stats.get("near_dup")
    if isinstance(nd, dict):
        if nd.get("mode") == "cluster":
            lines += ["", f"near-dup (cluster)  {nd.get('removed', 0):,} of {nd.get('signatures', 0):,} kept documents "
                      f"removed, {nd.get('clusters', 0):,} clusters, {nd.get('pairs', 0):,} pairs; clustering peak "
                      f"{_human_bytes(nd.get('peak_bytes', 0))} ({nd.get('bytes_per_doc', 0):.0f} B/doc)",
                      f"                    before this pass: signatures {nd.get('pass1_seconds') or 0:.1f} s, "
                      f"clustering {nd.get('seconds', 0):.1f} s (not in the time above)"]
        elif nd.get("mode") == "stream":
            bi = nd.get("band_index", {})
            lines += ["", f"near-dup (stream)   {nd.get('removed', 0):,} removed" +
                      (f"; band index {bi.get('entries', 0):,} keys, {_human_bytes(bi.get('table_bytes', 0))} "
                       f"({bi.get('bytes_per_document', 0):.0f} B/doc)" if bi else "")]
    pii = {k: v for k, v in stats.get("pii_replacements", {}).items() if k in _PII_ORDER}
    if pii:
        lines += ["", "PII masked   " + "   ".join(f"{k} {v:,}" for k, v in sorted(pii.items(), key=lambda kv: _PII_ORDER.index(kv[0])))]
    bg = stats.get("by_group")
    if bg:
        reasons = _group_columns(bg["groups"])
        lines += ["", f"by {bg['field'] or 'group'} (dropped by rule family):",
                  f"  {'':<18}{'docs':>8}{'kept':>8}" + "".join(f"{_short(r):>14}" for r in reasons)]
        for g, outcome in _top_groups(bg["groups"], top):
            tot = sum(outcome.values())
            fam: Dict[str, int] = {}
            for r, c in outcome.items():
                fam[_family(r)] = fam.get(_family(r), 0) + c
            lines.append(f"  {g[:18]:<18}{tot:>8,}{outcome.get('kept', 0):>8,}" +
                         "".join(f"{fam.get(r, 0):>14,}" for r in reasons))
    return "\n".join(lines)


_PII_ORDER = ["email", "ipv4", "ipv6", "phone", "credit_card", "iban"]


def _short(reason: str) -> str:
    return {"gopher_repetition": "gopher_rep", "gopher_quality": "gopher_qual"}.get(reason, reason)[:13]


def _group_columns(groups: Dict[str, Dict[str, int]], k: int = 4) -> List[str]:
    """The reasons shown as columns for the groups: duplicate, empty, and the rule families."""
    fam: Dict[str, int] = {}
    for outcome in groups.values():
        for r, c in outcome.items():
            if r != "kept":
                fam[_family(r)] = fam.get(_family(r), 0) + c
    return [r for r, _ in sorted(fam.items(), key=lambda kv: -kv[1])][: k + 2]


def _family(reason: str) -> str:
    return reason.split(".", 1)[0]


# ---------------------------------------------------------------- the picture
_COLORS = {"kept": "#2a9d8f", "duplicate": "#e76f51", "near_duplicate": "#b5179e", "empty": "#8d99ae", "too_large": "#6c757d",
           "gopher_repetition": "#f4a261", "gopher_quality": "#e9c46a", "c4": "#457b9d", "fineweb": "#9b5de5",
           "other": "#adb5bd"}


def _reason_color(reason: str) -> str:
    return _COLORS.get(reason, _COLORS.get(_family(reason), _COLORS["other"]))


def render_report(stats: Dict[str, Any], path: str, title: Optional[str] = None) -> str:
    """Draws report.png from a stats.json dict (matplotlib, Agg backend).  matplotlib's
    own warnings (an unwritable cache folder, layout notes) are not shown: the
    picture is the output, and ``-q`` means quiet."""
    import logging
    import warnings

    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="matplotlib")
        warnings.filterwarnings("ignore", category=UserWarning, message=".*[Mm]atplotlib.*")
        return _render_report(stats, path, title)


def _render_report(stats: Dict[str, Any], path: str, title: Optional[str]) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    plt.rcParams.update({"font.size": 10, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.titleweight": "bold", "axes.titlesize": 12, "axes.titlelocation": "left",
                         "axes.grid": True, "grid.alpha": 0.25, "grid.linestyle": "-"})
    fig = plt.figure(figsize=(17, 10), dpi=110)
    gs = fig.add_gridspec(2, 3, hspace=0.38, wspace=0.42, left=0.15, right=0.985, top=0.8, bottom=0.08)
    d = stats["documents"]
    n = max(d["input"], 1)
    th = stats["throughput"]

    # -- header: the numbers that matter, as big tiles
    ax = fig.add_axes([0.015, 0.855, 0.97, 0.085])
    ax.axis("off")
    fig.text(0.015, 0.985, title or "luminamoon run", fontsize=17, fontweight="bold", va="top")
    tiles = [
        ("documents in", f"{d['input']:,}", "#264653"),
        ("kept", f"{d['kept']:,}  ({100 * d['kept'] / n:.1f} %)", _COLORS["kept"]),
        ("dropped", f"{d['dropped']:,}", _COLORS["duplicate"]),
        ("text in → out", f"{_human_bytes(stats['bytes']['input'])} → {_human_bytes(stats['bytes']['output'])}", "#457b9d"),
        ("throughput", f"{th['docs_per_s']:,.0f} docs/s · {th['mb_per_s']:.1f} MB/s", "#9b5de5"),
        ("PII masked", f"{sum(v for k, v in stats.get('pii_replacements', {}).items() if k in _PII_ORDER):,}", "#f4a261"),
    ]
    for i, (label, value, color) in enumerate(tiles):
        x0 = i / len(tiles)
        ax.add_patch(matplotlib.patches.FancyBboxPatch((x0 + 0.004, 0.05), 1 / len(tiles) - 0.008, 0.9,
                                                       boxstyle="round,pad=0.0,rounding_size=0.04",
                                                       transform=ax.transAxes, facecolor=color, alpha=0.12,
                                                       edgecolor=color, linewidth=1.2))
        ax.text(x0 + 0.5 / len(tiles), 0.68, label, transform=ax.transAxes, ha="center", va="center",
                fontsize=10, color="#333333")
        ax.text(x0 + 0.5 / len(tiles), 0.3, value, transform=ax.transAxes, ha="center", va="center",
                fontsize=13.5 if len(value) < 24 else 11.5, fontweight="bold", color=color)
    extra = []
    if d.get("skipped_bad_records"):
        extra.append(f"{d['skipped_bad_records']:,} bad records skipped")
    if th.get("runs", 1) > 1:
        extra.append(f"resumed: {th['runs']} runs")
    if extra:
        fig.text(0.985, 0.985, " · ".join(extra), ha="right", va="top", fontsize=10, color="#666666")

    # -- outcomes by reason
    ax = fig.add_subplot(gs[0, 0])
    items = [("kept", d["kept"])] + list(stats["dropped_by_reason"].items())
    top = 13
    if len(items) > top:
        rest = sum(c for _, c in items[top - 1:])
        items = items[: top - 1] + [(f"other ({len(items) - top + 1} rules)", rest)]
    labels = [r for r, _ in items][::-1]
    vals = [c for _, c in items][::-1]
    bars = ax.barh(range(len(vals)), vals, color=[_reason_color(r) for r in labels], height=0.72)
    ax.set_yticks(range(len(vals)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlim(0, max(vals + [1]) * 60)
    for b, v in zip(bars, vals):
        ax.text(b.get_width() * 1.12 + 0.5, b.get_y() + b.get_height() / 2, f"{v:,}  ({100 * v / n:.1f}%)",
                va="center", fontsize=8)
    ax.set_title("Documents kept and dropped, by reason")
    ax.set_xlabel("documents (log scale)")
    ax.grid(axis="y", visible=False)

    # -- length histograms
    ax = fig.add_subplot(gs[0, 1])
    h = stats["length_histogram"]
    edges = np.array(h["edges"], dtype=float)
    hin, hout = np.array(h["input"]), np.array(h["kept"])
    nz = np.nonzero(hin + hout)[0]
    if len(nz):
        lo, hi = max(nz[0], 1), min(nz[-1] + 2, len(edges) - 1)
        x = edges[lo:hi + 1]
        fin = hin[lo:hi] / max(hin.sum(), 1) * 100
        fout = hout[lo:hi] / max(hout.sum(), 1) * 100
        ax.stairs(fin, x, fill=True, color="#8d99ae", alpha=0.45, label=f"input ({int(hin.sum()):,} docs)")
        ax.stairs(fout, x, color=_COLORS["kept"], linewidth=2, label=f"kept, after cleaning ({int(hout.sum()):,} docs)")
        if hin[0]:
            ax.text(0.01, 0.97, f"{int(hin[0]):,} empty inputs", transform=ax.transAxes, fontsize=8, va="top", color="#555")
        ax.set_xscale("log")
        for q, ls in ((0.5, "--"),):
            for arr, col in ((hin, "#5c677d"), (hout, _COLORS["kept"])):
                if arr.sum():
                    c = np.cumsum(arr)
                    i = int(np.searchsorted(c, q * c[-1]))
                    ax.axvline(edges[min(i + 1, len(edges) - 1)], color=col, linestyle=ls, linewidth=1)
    ax.set_title("Document length, before and after (median dashed)")
    ax.set_xlabel("bytes per document (log scale)")
    ax.set_ylabel("% of the documents")
    ax.legend(fontsize=8.5, frameon=False, loc="upper left", bbox_to_anchor=(0.0, 0.93))

    # -- PII
    ax = fig.add_subplot(gs[0, 2])
    pii = stats.get("pii_replacements", {})
    names = [k for k in _PII_ORDER if k in pii] or _PII_ORDER
    vals = [int(pii.get(k, 0)) for k in names]
    pal = ["#f4a261", "#e76f51", "#e9c46a", "#2a9d8f", "#264653", "#9b5de5"]
    bars = ax.bar(range(len(names)), vals, color=pal[: len(names)], width=0.65)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([k.replace("_", "\n") for k in names])
    for b, v in zip(bars, vals):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{v:,}", ha="center", va="bottom", fontsize=9)
    ax.set_title("PII masked in kept documents, by type")
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_ylabel("replacements")
    ax.grid(axis="x", visible=False)
    if not any(vals):
        ax.text(0.5, 0.5, "no PII found (or masking off)", transform=ax.transAxes, ha="center", color="#777")

    # -- throughput over time
    ax = fig.add_subplot(gs[1, 0])
    series = np.array((th.get("series") or {}).get("rows", []), dtype=float).reshape(-1, 3)
    if len(series) >= 3:
        t, by = series[:, 0], series[:, 2]
        window = max((t[-1] - t[0]) / 25.0, 0.25)
        js = np.searchsorted(t, t - window, side="right") - 1
        ok = js >= 0
        tm = t[ok]
        rate_mb = (by[ok] - by[js[ok]]) / np.maximum(t[ok] - t[js[ok]], 1e-9) / 1e6
        ax.plot(tm, rate_mb, color="#9b5de5", linewidth=1.8, label=f"MB/s of text, {window:.1f} s window")
        ax.fill_between(tm, rate_mb, color="#9b5de5", alpha=0.12)
        ax.axhline(th["mb_per_s"], color="#5a189a", linestyle="--", linewidth=1,
                   label=f"mean {th['mb_per_s']:.1f} MB/s, {th['docs_per_s']:,.0f} docs/s")
        ax.set_ylim(0, max(float(rate_mb.max()) if len(rate_mb) else 0, th["mb_per_s"]) * 1.25 + 1e-9)
        ax.legend(fontsize=8, frameon=False, loc="lower right")
    else:
        ax.text(0.5, 0.55, f"{th['mb_per_s']:.1f} MB/s", transform=ax.transAxes, ha="center", fontsize=20,
                color="#9b5de5", fontweight="bold")
        ax.text(0.5, 0.4, "(too few batches for a time series)", transform=ax.transAxes, ha="center", color="#777")
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_title(f"Throughput ({th['seconds']:.1f} s in all)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MB/s")

    # -- per group (demo: ground truth) or the cleaner's repairs
    ax = fig.add_subplot(gs[1, 1:])
    bg = stats.get("by_group")
    if bg and bg["groups"]:
        groups = _top_groups(bg["groups"], 20)[::-1]  # the largest at the top; bounded whatever the cardinality
        cols = ["kept"] + _group_columns(bg["groups"], k=5)
        left = np.zeros(len(groups))
        for c in cols:
            v = np.array([sum(x for r, x in o.items() if (r == c if c == "kept" else _family(r) == c and r != "kept"))
                          for _, o in groups], dtype=float)
            tot = np.array([max(sum(o.values()), 1) for _, o in groups], dtype=float)
            ax.barh(range(len(groups)), v / tot * 100, left=left, color=_reason_color(c), label=c, height=0.7)
            for i, (vi, li) in enumerate(zip(v / tot * 100, left)):
                if vi >= 7:
                    ax.text(li + vi / 2, i, f"{vi:.0f}%", ha="center", va="center", fontsize=7.5, color="white")
            left += v / tot * 100
        ax.set_yticks(range(len(groups)))
        ax.set_yticklabels([f"{g}  ({sum(o.values()):,})" for g, o in groups], fontsize=8.5)
        ax.set_xlim(0, 100)
        ax.set_xlabel("share of the group's documents (%)")
        ax.set_title(f"What happened to each {bg['field'] or 'group'}")
        ax.legend(ncol=len(cols), fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.12))
        ax.grid(axis="y", visible=False)
    else:
        cl = stats.get("cleaner", {})
        rep = stats.get("input_repairs", {})
        keys = [("invalid_sequences", "invalid UTF-8"), ("control_removed", "control chars"),
                ("spaces_folded", "Unicode spaces"), ("spaces_collapsed", "runs of spaces"),
                ("trailing_trimmed", "trailing spaces"), ("blank_lines_removed", "blank lines"),
                ("docs_normalized", "NFC/NFKC (docs)")]
        vals = [int(cl.get(k, 0)) + int(rep.get(k, 0)) for k, _ in keys]
        qmod = stats.get("quality", {}).get("docs_modified")
        labels = [lab for _, lab in keys]
        if qmod is not None:
            labels.append("C4 line removal (docs)")
            vals.append(int(qmod))
        bars = ax.barh(range(len(vals)), vals, color="#457b9d", height=0.65)
        ax.set_yticks(range(len(vals)))
        ax.set_yticklabels(labels)
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(0, max(vals + [1]) * 6)
        for b, v in zip(bars, vals):
            ax.text(b.get_width() * 1.1 + 0.5, b.get_y() + b.get_height() / 2, f"{v:,}", va="center", fontsize=8.5)
        ax.set_title("What the cleaner repaired and removed (characters unless noted)")
        ax.grid(axis="y", visible=False)
    with atomic_replace(path, tmp=path + ".tmp.png") as tmp:  # savefig picks the format from the suffix
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path
