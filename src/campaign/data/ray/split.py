"""The Ray engine's split job (split.split_file on engine="ray"), for a corpus held as shards. The duplicates are
found on Ray Data as find_duplicates finds them (exact copies by content hash; near copies among one representative
per exact group, LSH candidates with the same bucket cap, confirmed by exact Jaccard) and handed to the pipeline
with the group links, which forms the units and places them as on one machine. Each split is written as a folder
of shards (one per input shard, each atomically) and described by manifest.json, written last.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ...checks import status_of
from ..dedup import connected_components, pairs_in_sorted_runs
from ..leak_report import LeakReport
from ..payload import dumps as dump_payload, loads as load_payload
from ..read import Dataset, Fields
from ..shards import finish_shard_set, list_shards, start_shard_set
from ..split_clusters import row_hash, write_cluster_rows
from ..split_manifest import SHARDS_MANIFEST_NAME, SHARDS_SCHEMA
from ..split_result import ShardSplit, SplitPart, SplitSpec, label_conflict_check, ratio_checks, written_leak_checks
from ..splitter import NO_LABEL
from ..units import UnitInputs
from .records import Candidates, ExactAndGroups, ShardLabels
from .search import ShardedSplit, confirm
from .session import collect, kind, run, source
from .stages import PART, SHARD, sketch_shards
from .writes import write_split

if TYPE_CHECKING:
    import numpy as np

    from ..dedup import DedupResult


class RaySplitJob:
    """One split of a corpus in shards on Ray. Made with the output prepared (an earlier complete set refused
    without force, the split folders made, an earlier split's shards removed); inside the engine's session:
    read(), unit_inputs(), then write() and check per merge round, finish() last."""

    def __init__(self, engine: Any, data: str, out: Path, spec: SplitSpec, fields: Fields, *, force: bool,
                 skip_bad: bool) -> None:
        self.engine, self.data, self.out, self.spec = engine, data, out, spec
        self.fields, self.skip_bad = fields, skip_bad
        self.listed = list_shards(str(data))
        start_shard_set(out, force=force, what="--out", inputs=self.listed)
        self.base = [f"{k:05d}-{Path(p).name}" for k, p in enumerate(self.listed)]
        self.targets = {k: [os.path.abspath(out / n / b) for n in spec.names] for k, b in enumerate(self.base)}
        for n in spec.names:
            (out / n).mkdir(exist_ok=True)
            for e in os.scandir(out / n):                        # an earlier split's shards (its manifest is gone)
                if e.is_file() and e.name not in self.base:
                    os.unlink(e.path)
        self.written = [str(out / nm) for nm in spec.names]
        self.shards_written: list[Any] = []

    def read(self) -> int:
        """Stage 1 (read and sketch each shard); the usable rows."""
        import numpy as np

        ray, parts, config = self.engine.ray, self.engine.parts, self.spec.config
        items = [{"split": 0, "shard": k, "path": p, "source": source(p)} for k, p in enumerate(self.listed)]
        self.mat = run(ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            sketch_shards, batch_size=1, batch_format="numpy",
            fn_kwargs={"config": config, "fields": self.fields, "skip_bad": self.skip_bad, "parts": parts}).materialize)
        got = sorted(collect(self.mat.filter(expr=kind(SHARD)).map_batches(shard_labels, batch_size=1,
                                                                           batch_format="numpy")),
                     key=lambda g: g.shard)
        self.rows_of_shard = [g.rows for g in got]
        self.offsets = np.cumsum([0] + self.rows_of_shard)[:-1].astype(np.int64)
        self.split = ShardedSplit("data", str(self.data), tuple({"rows": r} for r in self.rows_of_shard),
                                  self.offsets)
        self.labels = [x for g in got for x in g.labels] if self.fields.label else None
        self.ids = [x for g in got for x in g.ids] if self.fields.id else None
        self.row_hashes = [x for g in got for x in g.row_hashes]
        # the rows as messages name them (Dataset.ref: the listed shard and line, with the id), without their texts
        self.refs = [Dataset(p, g.format, self.fields, (), labels=g.labels, ids=g.ids, lines=g.lines)
                     for p, g in zip(self.listed, got, strict=True)]
        self.dates = None
        return self.split.rows

    def unit_inputs(self) -> UnitInputs:
        """Exact copies and shared group values per part, near copies among the representatives: the duplicate
        clusters (connected components) and the group links, as rows of the corpus."""
        import numpy as np

        ray, parts, config, sp = self.engine.ray, self.engine.parts, self.spec.config, self.split
        found = collect(self.mat.filter(expr=kind(PART)).groupby("part", num_partitions=parts).map_groups(
            exact_and_groups, batch_format="numpy"))
        copies = np.concatenate([f.copies for f in found]) if found else np.zeros(0, np.int64)
        first = np.concatenate([f.first for f in found]) if found else np.zeros(0, np.int64)
        group_links = [(int(a), int(b)) for f in found for a, b in f.group_links]
        cand = collect(self.mat.filter(expr=kind(PART)).groupby("part", num_partitions=parts).map_groups(
            self_candidates, batch_format="numpy", fn_kwargs={"copies": copies, "cap": config.max_bucket}))
        self.capped = sum(c.capped for c in cand)
        near_pairs = confirm(ray, self.mat, [sp], {(0, 0): [(c.lo, c.hi) for c in cand if len(c.lo)]}, config,
                             parts)[0, 0]
        a = np.concatenate((sp.gid(copies), np.asarray([p[0] for p in near_pairs], dtype=np.int64)))
        b = np.concatenate((sp.gid(first), np.asarray([p[1] for p in near_pairs], dtype=np.int64)))
        self.duplicates = {"exact_duplicates": len(copies), "near_pairs": len(near_pairs)}
        gl = np.asarray(group_links, dtype=np.int64).reshape(-1, 2)
        self.cluster_of = connected_components(sp.rows, a, b)
        return UnitInputs(self.cluster_of,
                          links=list(zip(sp.gid(gl[:, 0]).tolist(), sp.gid(gl[:, 1]).tolist(), strict=True)))

    def staged(self) -> AbstractContextManager[Any]:
        """Each shard is written atomically and the manifest last: nothing to stage."""
        return nullcontext()

    def write(self, assign: np.ndarray) -> None:
        """Each input shard's rows into the split folders, on the workers."""
        per_shard = {k: assign[self.offsets[k]:self.offsets[k] + self.rows_of_shard[k]]
                     for k in range(len(self.rows_of_shard))}
        self.shards_written = collect(self.mat.filter(expr=kind(SHARD)).map_batches(
            write_split, batch_size=1, batch_format="numpy", fn_kwargs={"assign": per_shard,
                                                                        "targets": self.targets}))

    def finish(self, assign: np.ndarray, units: np.ndarray, leaks: LeakReport,
               links: Sequence[tuple[int, int]]) -> ShardSplit:
        """manifest.json, written last: every shard with its rows and sha256, the achieved fractions, the checks."""
        import numpy as np

        spec, out, n = self.spec, self.out, self.split.rows
        name_t, ratio_t, seed, config = spec.names, spec.ratios, spec.seed, spec.config
        shards = []
        for w in sorted(self.shards_written, key=lambda w: w.shard):
            for s, nm in enumerate(name_t):
                shards.append({"split": nm, "input": self.listed[w.shard], "path": f"{nm}/{self.base[w.shard]}",
                               "rows": w.counts[s], "sha256": w.sha256s[s]})
        labels = self.labels
        lab = np.asarray([NO_LABEL if v is None else v for v in labels], dtype=object) if labels else None
        label_names = sorted(set(lab.tolist())) if lab is not None else []
        label_total = {x: int((lab == x).sum()) for x in label_names}
        split_parts = []
        for s, nm in enumerate(name_t):
            r = np.flatnonzero(assign == s)
            per = {x: int((lab[r] == x).sum()) for x in label_names} if lab is not None else {}
            split_parts.append(SplitPart(name=nm, path=str(out / nm), sha256="", rows=len(r),
                                         target_fraction=ratio_t[s], fraction=len(r) / n, labels=per,
                                         label_fractions={k: v / label_total[k] for k, v in per.items()
                                                          if label_total[k]}))
        checks, notes = ratio_checks(split_parts, label_total, spec.tolerance, spec.stratify)
        if labels is not None:
            # the local engine's check on what the engine holds: it reads only d.clusters, ds.labels and ds.ref(i)
            checks.append(label_conflict_check(cast("DedupResult", DuplicateClusters(self.cluster_of)),
                                               cast("Dataset", RowsAsRead(self))))
        sizes = np.bincount(np.unique(units, return_inverse=True)[1])
        if links:
            notes.append(f"the check of the written shards (MinHash seed {seed + 1}) found {len(links)} "
                         f"near-duplicate pair(s) across splits that the split's own search (seed {seed}) missed; "
                         "they were kept together and the data split again")
        if self.capped:
            notes.append(f"{self.capped} LSH bucket(s) held more than {config.max_bucket} texts; only neighbouring "
                         "pairs in them were checked")
        every = (*checks, *written_leak_checks(leaks))     # the verdict's checks: the split's and the leak check's
        # the per-row clusters (split_clusters.py), as the local engine writes them, before the manifest that names it
        clusters = write_cluster_rows(out, self.ids, self.row_hashes, assign, units, name_t)
        return ShardSplit(every, finish_shard_set(
            out, SHARDS_SCHEMA, shards, status=status_of(every), input=str(self.data),
            parameters={"ratios": list(ratio_t), "names": list(name_t), "stratify": spec.stratify,
                        "fields": self.fields.to_dict(), "dedup": config.to_dict(), "tolerance": spec.tolerance,
                        "leak_check_seed": seed + 1},
            splits=[p.to_dict() for p in split_parts], units=len(sizes), largest_unit=int(sizes.max()),
            duplicates=self.duplicates, checks=[c.to_dict() for c in every], leaks=leaks.to_dict(), notes=notes,
            clusters=clusters),
            str(out / SHARDS_MANIFEST_NAME))


class DuplicateClusters:
    """The duplicate clusters as label_conflicts reads them (DedupResult.clusters): from each row's component."""

    def __init__(self, cluster_of: np.ndarray) -> None:
        self.cluster_of = cluster_of

    @property
    def clusters(self) -> list[list[int]]:
        """Clusters of two or more rows, each sorted, ordered by first member."""
        import numpy as np

        c = np.asarray(self.cluster_of)
        order = np.argsort(c, kind="stable")
        roots, starts, counts = np.unique(c[order], return_index=True, return_counts=True)
        out = [order[s:s + k].tolist() for s, k in zip(starts.tolist(), counts.tolist(), strict=True) if k > 1]
        return sorted(out, key=lambda m: m[0])


class RowsAsRead:
    """The corpus's rows as label_conflict_check reads a Dataset: their labels, and ref(i) naming global row i by
    its listed shard and line (with its id)."""

    def __init__(self, job: RaySplitJob) -> None:
        self.labels, self.job = job.labels, job

    def __len__(self) -> int:
        return int(self.job.split.rows)

    def ref(self, i: int) -> str:
        import numpy as np

        k = int(np.searchsorted(self.job.offsets, i, side="right")) - 1
        return self.job.refs[k].ref(i - int(self.job.offsets[k]))


def exact_and_groups(batch: dict[str, Any]) -> dict[str, Any]:
    """One part: each non-empty row whose content hash an earlier row has, with that first row (exact copies),
    and each row whose group value an earlier row has, with that first row."""
    import numpy as np

    loads = [load_payload(p) for p in batch["payload"]]
    dig = np.concatenate([d["dig"] for d in loads]) if loads else np.zeros(0, "S32")
    enc = np.concatenate([d["dig_enc"] for d in loads]) if loads else np.zeros(0, np.int64)
    o = np.argsort(enc, kind="stable")
    o = o[np.argsort(dig[o], kind="stable")]                     # by (hash, row)
    dig, enc = dig[o], enc[o]
    new = np.ones(len(dig), dtype=bool)
    new[1:] = dig[1:] != dig[:-1]
    first = enc[np.maximum.accumulate(np.where(new, np.arange(len(dig)), 0))]
    exact = (enc[~new], first[~new])
    first_of: dict[tuple[int, str], int] = {}
    for d in loads:
        for f, v, e in d["groups"]:
            if e < first_of.get((f, v), e + 1):
                first_of[f, v] = e
    links = [(e, first_of[f, v]) for d in loads for f, v, e in d["groups"] if first_of[f, v] != e]
    return {"payload": np.asarray([dump_payload(ExactAndGroups(*exact, links))], dtype=object)}


def self_candidates(batch: dict[str, Any], *, copies: Any, cap: int) -> dict[str, Any]:
    """One part: pairs (lo, hi) of representatives sharing a band key, each paired with its next `cap` rows of the
    bucket in row order (dedup.candidate_pairs's rule), and the number of capped buckets."""
    import numpy as np

    loads = [load_payload(p) for p in batch["payload"]]
    band = np.concatenate([d["band"] for d in loads])
    key = np.concatenate([d["key"] for d in loads])
    enc = np.concatenate([d["enc"] for d in loads])
    keep = ~np.isin(enc, copies)
    band, key, enc = band[keep], key[keep], enc[keep]
    order = np.lexsort((enc, key, band))
    band, key, enc = band[order], key[order], enc[order]
    bounds = np.searchsorted(band, np.arange(int(band.max()) + 2)) if len(band) else np.zeros(1, np.int64)
    out_a, out_b, capped = [], [], 0
    for band_no in range(len(bounds) - 1):
        sl = slice(bounds[band_no], bounds[band_no + 1])
        a_, b_, c = pairs_in_sorted_runs(enc[sl], key[sl], cap)
        out_a.append(np.minimum(a_, b_))
        out_b.append(np.maximum(a_, b_))
        capped += c
    a = np.concatenate(out_a) if out_a else np.zeros(0, np.int64)
    b = np.concatenate(out_b) if out_b else np.zeros(0, np.int64)
    return {"payload": np.asarray([dump_payload(Candidates(a, b, capped))], dtype=object)}


def shard_labels(batch: dict[str, Any]) -> dict[str, Any]:
    """Each shard: (shard, rows, labels, ids, row hashes, format, lines)."""
    import numpy as np

    out = []
    for sh, p in zip(batch["shard"].tolist(), batch["payload"], strict=True):
        ds = load_payload(p).dataset
        out.append(dump_payload(ShardLabels(int(sh), len(ds), ds.labels, ds.ids, [row_hash(t) for t in ds.texts],
                                            ds.format, ds.lines)))
    return {"payload": np.asarray(out, dtype=object)}


__all__ = ["DuplicateClusters", "RaySplitJob", "RowsAsRead", "exact_and_groups", "self_candidates", "shard_labels"]
