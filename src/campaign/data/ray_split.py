"""`campaign split --engine ray`: a leak-free split of a corpus held as shards. The duplicates are found on Ray Data
as find_duplicates finds them (exact copies by content hash; near copies among one representative per exact group,
LSH candidates with the same bucket cap, confirmed by exact Jaccard), joined with the group values into units by
connected components, and the units placed by split.assign_units (the same stratified allocation: no unit straddles
splits, ratios as row fractions). Each split is written as a folder of shards (one per input shard, each atomically),
then checked for leaks on the engine with other hash functions (seed + 1) as split_file does, re-split with what
that check finds, and described by manifest.json, written last.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import InputError
from .ray_engine import _collect, _confirm, _kind, _run, _Split, find_leaks_ray, ray_session, source
from .ray_stages import _PART, _SHARD, _sketch_shards
from .read import Fields
from .shards import finish_shard_set, list_shards, start_shard_set
from .sketch import DedupConfig
from .payload import dumps as dump_payload, loads as load_payload

SPLIT_SCHEMA = "campaign.split_shards/1"


@dataclass(frozen=True)
class ShardSplit:
    """What `campaign split --engine ray` wrote: its manifest (out_dir/manifest.json) and where it is."""

    manifest: dict[str, Any]
    path: str

    @property
    def passed(self) -> bool:
        return self.manifest["status"] == "pass"

    def to_dict(self) -> dict[str, Any]:  # by hand: the manifest as written, with its path
        return {**self.manifest, "manifest": self.path}


def _exact_and_groups(batch: dict[str, Any]) -> dict[str, Any]:
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
    return {"payload": np.asarray([dump_payload((exact, links))], dtype=object)}


def _self_candidates(batch: dict[str, Any], *, copies: Any, cap: int) -> dict[str, Any]:
    """One part: pairs (lo, hi) of representatives sharing a band key, each paired with its next `cap` rows of the
    bucket in row order (dedup.candidate_pairs's rule), and the number of capped buckets."""
    import numpy as np

    from .dedup import _pairs_in_sorted_runs

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
    for b in range(len(bounds) - 1):
        sl = slice(bounds[b], bounds[b + 1])
        a_, b_, c = _pairs_in_sorted_runs(enc[sl], key[sl], cap)
        out_a.append(np.minimum(a_, b_))
        out_b.append(np.maximum(a_, b_))
        capped += c
    a = np.concatenate(out_a) if out_a else np.zeros(0, np.int64)
    b = np.concatenate(out_b) if out_b else np.zeros(0, np.int64)
    return {"payload": np.asarray([dump_payload((a, b, capped))], dtype=object)}


def _labels(batch: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    out = []
    for sh, p in zip(batch["shard"].tolist(), batch["payload"]):
        ds, _ = load_payload(p)
        out.append(dump_payload((int(sh), len(ds), ds.labels)))
    return {"payload": np.asarray(out, dtype=object)}


def _write_split(batch: dict[str, Any], *, assign: dict[int, Any], targets: dict[int, list[str]]) -> dict[str, Any]:
    """Each shard's rows into the split folders (row r to targets[shard][assign[shard][r]]), in the input's format
    and order, each file written under a hidden temporary name and renamed into place."""
    import numpy as np

    from ..io import sha256_file
    from .ray_stages import _tmp
    from .shards import local_copy
    from .write import write_rows

    out = []
    for sh, payload in zip(batch["shard"].tolist(), batch["payload"]):
        ds, source = load_payload(payload)
        tmps = [_tmp(t) for t in targets[sh]]
        with local_copy(source) as local:
            write_rows(replace(ds, path=local), assign[sh], [Path(t) for t in tmps])
        for t, final in zip(tmps, targets[sh]):
            os.replace(t, final)
        counts = np.bincount(assign[sh], minlength=len(targets[sh])).tolist()
        out.append(dump_payload((sh, counts, [sha256_file(t) for t in targets[sh]])))
    return {"payload": np.asarray(out, dtype=object)}


def split_ray(data: str | os.PathLike[str], out_dir: str | os.PathLike[str], fields: Fields | None = None, *,
              ratios: str | Sequence[float] = (0.8, 0.1, 0.1), names: str | Sequence[str] | None = None,
              stratify: bool | None = None, seed: int = 0, dedup: DedupConfig | None = None,
              tolerance: float = 0.01, skip_bad: bool = False, force: bool = False, parts: int | None = None,
              address: str | None = None, workers: int | None = None) -> ShardSplit:
    """split_file for a corpus in shards (a file, folder, glob or object-store path), on Ray. The split is the
    one LeakFreeSplitter.assign gives on the shards concatenated in path order (same units, same allocation);
    out_dir/NAME/ holds split NAME's rows as one shard per input shard (input order kept) and out_dir/manifest.json,
    written last, lists every shard with its rows and sha256, the achieved fractions and the checks.

    Raises InputError on bad input (one line); a temporal split (--date) is not offered here.
    """
    import numpy as np

    from .split import MERGE_ROUNDS, SplitPart, _checks, assign_units, parse_ratios, split_names
    from .units import atomic_units

    fields = fields or Fields()
    if fields.date:
        raise InputError("a temporal split (--date) runs on one machine only; drop --engine ray or --date")
    ratio_t = parse_ratios(ratios)
    name_t = split_names(names, len(ratio_t))
    if stratify and not fields.label:
        raise InputError("stratifying needs a label field; pass --label FIELD or --no-stratify")
    stratify = bool(fields.label) if stratify is None else stratify
    if not 0 < tolerance < 1:
        raise InputError(f"tolerance {tolerance!r} must be a fraction in (0, 1); use e.g. 0.01 for one point")
    config = replace(dedup or DedupConfig(), seed=seed)
    out = Path(out_dir)
    listed = list_shards(str(data))
    start_shard_set(out, force=force, what="--out", inputs=listed)
    base = [f"{k:05d}-{Path(p).name}" for k, p in enumerate(listed)]
    targets = {k: [os.path.abspath(out / n / b) for n in name_t] for k, b in enumerate(base)}
    for n in name_t:
        (out / n).mkdir(exist_ok=True)
        for e in os.scandir(out / n):                        # an earlier split's shards (its manifest is gone)
            if e.is_file() and e.name not in base:
                os.unlink(e.path)
    with ray_session(address, workers) as ray:
        parts = parts or max(1, min(512, 4 * int(ray.cluster_resources().get("CPU", 1))))
        items = [{"split": 0, "shard": k, "path": p, "source": source(p)} for k, p in enumerate(listed)]
        mat = _run(ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            _sketch_shards, batch_size=1, batch_format="numpy",
            fn_kwargs={"config": config, "fields": fields, "skip_bad": skip_bad, "parts": parts}).materialize)
        got = sorted(_collect(mat.filter(expr=_kind(_SHARD)).map_batches(_labels, batch_size=1,
                                                                         batch_format="numpy")))
        rows = [k for _, k, _ in got]
        offsets = np.cumsum([0] + rows)[:-1].astype(np.int64)
        sp = _Split("data", str(data), tuple({"rows": r} for r in rows), offsets)
        n = sp.rows
        if n < len(name_t):
            raise InputError(f"{data}: {n} usable record(s) cannot fill {len(name_t)} splits; add data")
        labels = [x for _, _, lab in got for x in lab] if fields.label else None
        found = _collect(mat.filter(expr=_kind(_PART)).groupby("part", num_partitions=parts).map_groups(
            _exact_and_groups, batch_format="numpy"))
        copies = np.concatenate([f[0][0] for f in found]) if found else np.zeros(0, np.int64)
        first = np.concatenate([f[0][1] for f in found]) if found else np.zeros(0, np.int64)
        group_links = [(int(a), int(b)) for f in found for a, b in f[1]]
        cand = _collect(mat.filter(expr=_kind(_PART)).groupby("part", num_partitions=parts).map_groups(
            _self_candidates, batch_format="numpy", fn_kwargs={"copies": copies, "cap": config.max_bucket}))
        capped = sum(c[2] for c in cand)
        near_pairs = _confirm(ray, mat, [sp], {(0, 0): [(c[0], c[1]) for c in cand if len(c[0])]}, config,
                              parts)[0, 0]
        a = np.concatenate((sp.gid(copies), np.asarray([p[0] for p in near_pairs], dtype=np.int64)))
        b = np.concatenate((sp.gid(first), np.asarray([p[1] for p in near_pairs], dtype=np.int64)))
        from .dedup import connected_components

        cluster_of = connected_components(n, a, b)
        gl = np.asarray(group_links, dtype=np.int64).reshape(-1, 2)
        group_pairs = list(zip(sp.gid(gl[:, 0]).tolist(), sp.gid(gl[:, 1]).tolist()))
        links: list[tuple[int, int]] = []
        check_config = replace(config, seed=seed + 1)
        for attempt in range(1, MERGE_ROUNDS + 2):
            units = atomic_units(n, cluster_of=cluster_of, links=group_pairs + links)
            assign = assign_units(units, ratio_t, labels=labels if stratify else None, seed=seed)
            per_shard = {k: assign[offsets[k]:offsets[k] + rows[k]] for k in range(len(rows))}
            written = _collect(mat.filter(expr=_kind(_SHARD)).map_batches(
                _write_split, batch_size=1, batch_format="numpy", fn_kwargs={"assign": per_shard,
                                                                             "targets": targets}))
            leaks = find_leaks_ray([str(out / nm) for nm in name_t], fields, names=list(name_t),
                                   config=check_config, parts=parts, allow_empty=True)
            rows_of = {s: np.flatnonzero(assign == s) for s in range(len(name_t))}
            missed = [(int(rows_of[name_t.index(p.index)][i]), int(rows_of[name_t.index(p.query)][q]))
                      for p in leaks.check("leak.near_duplicate").pairs for i, q in p.linked]
            if not missed:
                break
            if attempt > MERGE_ROUNDS:
                raise InputError(f"{data}: the check of the split still finds near duplicates across splits after "
                                 f"{MERGE_ROUNDS} merges; raise --near-threshold or use a text field with less "
                                 "boilerplate")
            links.extend(missed)
    shards = []
    for sh, counts_s, shas in sorted(written):
        for s, nm in enumerate(name_t):
            shards.append({"split": nm, "input": listed[sh], "path": f"{nm}/{base[sh]}", "rows": counts_s[s],
                           "sha256": shas[s]})
    lab = np.asarray(["(none)" if v is None else v for v in labels], dtype=object) if labels else None
    label_names = sorted(set(lab.tolist())) if lab is not None else []
    label_total = {x: int((lab == x).sum()) for x in label_names}
    split_parts = []
    for s, nm in enumerate(name_t):
        r = np.flatnonzero(assign == s)
        per = {x: int((lab[r] == x).sum()) for x in label_names} if lab is not None else {}
        split_parts.append(SplitPart(name=nm, path=str(out / nm), sha256="", rows=len(r), target_fraction=ratio_t[s],
                                     fraction=len(r) / n, labels=per,
                                     label_fractions={k: v / label_total[k] for k, v in per.items() if label_total[k]}))
    checks, notes = _checks(split_parts, label_total, tolerance, stratify)
    sizes = np.bincount(np.unique(units, return_inverse=True)[1])
    if links:
        notes.append(f"the check of the written shards (MinHash seed {seed + 1}) found {len(links)} near-duplicate "
                     f"pair(s) across splits that the split's own search (seed {seed}) missed; they were kept "
                     "together and the data split again")
    if capped:
        notes.append(f"{capped} LSH bucket(s) held more than {config.max_bucket} texts; only neighbouring pairs in "
                     "them were checked")
    passed = leaks.passed and all(c.status != "fail" for c in checks)
    return ShardSplit(finish_shard_set(
        out, SPLIT_SCHEMA, shards, status="pass" if passed else "fail", input=str(data),
        parameters={"ratios": list(ratio_t), "names": list(name_t), "stratify": stratify, "fields": fields.to_dict(),
                    "dedup": config.to_dict(), "tolerance": tolerance, "leak_check_seed": seed + 1},
        splits=[p.to_dict() for p in split_parts], units=len(sizes), largest_unit=int(sizes.max()),
        duplicates={"exact_duplicates": len(copies), "near_pairs": len(near_pairs)},
        checks=[c.to_dict() for c in checks], leaks=leaks.to_dict(), notes=notes), str(out / "manifest.json"))


__all__ = ["ShardSplit", "split_ray"]
