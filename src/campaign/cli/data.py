"""`campaign split`, `campaign leaks`, `campaign usage`: leak-free evaluation sets, leaks between splits, and how
often the final test split has been used to decide."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from . import common as o

if TYPE_CHECKING:
    from ..data.read import Fields
    from ..data.sketch import DedupConfig

# Help panels of these commands (beside common's INPUT and OUTPUT).
SPLIT, DUPLICATES, ENGINE, CHECK, USE = "Split", "Near duplicates", "Engine", "Check", "Record a use"

Text = Annotated[list[str] | None, typer.Option("--text", help="Text field (repeat to join several with a newline). "
        "Default: text.", rich_help_panel=o.INPUT)]
Label = Annotated[str | None, typer.Option("--label", help="Label field (stratification, label conflicts).",
                                           rich_help_panel=o.INPUT)]
Group = Annotated[list[str] | None, typer.Option("--group", help="Group field: user, document, source... (repeatable); "
        "a group never straddles splits.", rich_help_panel=o.INPUT)]
IdField = Annotated[str | None, typer.Option("--id-field", help="Id field (kept in the files).",
                                             rich_help_panel=o.INPUT)]
OldId = Annotated[str | None, typer.Option("--id", hidden=True, help="The old spelling of --id-field.")]
SkipBad = Annotated[bool, typer.Option("--skip-bad", help="Skip and count malformed or non-UTF-8 records instead of "
        "stopping.", rich_help_panel=o.INPUT)]
NearThreshold = Annotated[float, typer.Option("--near-threshold", help="Jaccard similarity of shingles from which two "
        "texts are near duplicates.", rich_help_panel=DUPLICATES)]
Shingle = Annotated[str, typer.Option("--shingle", help="char (character n-grams) | word (word n-grams).",
                                      rich_help_panel=DUPLICATES)]
Ngram = Annotated[int, typer.Option("--ngram", help="n of the shingles.", rich_help_panel=DUPLICATES)]
StripPunct = Annotated[bool, typer.Option("--strip-punctuation", help="Ignore punctuation when comparing texts.",
                                          rich_help_panel=DUPLICATES)]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the hashes and of the tie-breaks.",
                                   rich_help_panel=DUPLICATES)]
RayAddress = Annotated[str | None, typer.Option("--address", help="--engine ray: the Ray cluster (default: "
                                               "RAY_ADDRESS, else a local Ray on this machine).",
                                               rich_help_panel=ENGINE)]
RayWorkers = Annotated[int | None, typer.Option("--workers", help="--engine ray without a cluster: CPUs of the local "
                                                "Ray (default: all).", rich_help_panel=ENGINE)]
MaxBucket = Annotated[int, typer.Option("--max-bucket", help="LSH bucket size beyond which texts are compared with "
        "their next neighbours only (a partial near-duplicate search is reported, never passed).",
        rich_help_panel=DUPLICATES)]


def register(app: typer.Typer) -> None:
    app.command("split", epilog="Example: campaign split data.jsonl --out splits --label label --group user")(split)
    app.command("leaks", epilog="Example: campaign leaks train.jsonl val.jsonl test.jsonl --group user")(leaks)
    app.command("usage", epilog="Example: campaign usage splits --use test --purpose final-test")(usage)


def _fields(text: list[str] | None, label: str | None, group: list[str] | None, id_: str | None,
            date: str | None = None) -> Fields:
    from ..data.read import Fields

    return Fields(text=tuple(text or ("text",)), label=label, group=tuple(group or ()), id=id_, date=date)


def _bars(as_json: bool) -> bool | None:
    """The library's progress (bars of rows sketched per split, the Ray engine's phase, on stderr): on a terminal
    (None: the library looks), never under --json."""
    return False if as_json else None


def _config(near_threshold: float, shingle: str, ngram: int, strip_punctuation: bool, seed: int,
            max_bucket: int = 256) -> DedupConfig:
    from ..data.sketch import DedupConfig

    return DedupConfig(threshold=near_threshold, shingle=shingle, ngram=ngram, strip_punctuation=strip_punctuation,
                       seed=seed, max_bucket=max_bucket)


def split(
    data: Annotated[str, typer.Argument(help="Input file: .jsonl, .csv, .tsv or .parquet, or a Hugging Face dataset (a "
            "Dataset.save_to_disk folder, an .arrow file) (never modified); with --engine ray, also a directory, a "
            "glob or an s3:// gs:// path of shards.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the split files and split_manifest.json.",
                                      rich_help_panel=o.OUTPUT)],
    text: Text = None, label: Label = None, group: Group = None, id_: IdField = None, old_id: OldId = None,
    date: Annotated[str | None, typer.Option("--date", help="Date field: a temporal split, oldest data first.",
                                             rich_help_panel=o.INPUT)] = None,
    ratios: Annotated[str, typer.Option(
        "--ratios", help="Fractions of rows per split, e.g. 80/10/10 or 0.9,0.1.", rich_help_panel=SPLIT)] = "80/10/10",
    names: Annotated[str | None, typer.Option("--names", help="Split names, e.g. train,val,test (default from the "
            "number of ratios).", rich_help_panel=SPLIT)] = None,
    stratify: Annotated[bool | None, typer.Option("--stratify/--no-stratify", help="Keep each label's ratios (default: "
            "on with --label, off with --date).", rich_help_panel=SPLIT)] = None,
    seed: Seed = 0,
    tolerance: Annotated[float, typer.Option("--tolerance", help="Largest gap between target and achieved row fraction "
            "(0.01 = 1 point).", rich_help_panel=SPLIT)] = 0.01,
    near_threshold: NearThreshold = 0.8, shingle: Shingle = "char", ngram: Ngram = 5,
    strip_punctuation: StripPunct = False,
    max_bucket: MaxBucket = 256,
    skip_bad: SkipBad = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an earlier split in --out: overwrite its files and "
            "remove the split files its manifest lists.", rich_help_panel=o.OUTPUT)] = False,
    engine: Annotated[str, typer.Option("--engine", help="local (this process) | ray (Ray Data; each split written as "
            "a folder of shards with manifest.json; pip install 'campaign[ray]').", rich_help_panel=ENGINE)] = "local",
    address: RayAddress = None,
    workers: RayWorkers = None,
    output: Annotated[str | None, typer.Option("--format", help="hf: write the splits as a Hugging Face DatasetDict "
            "(save_to_disk) in --out, whatever the input (default: the input's format; a saved Dataset in gives a "
            "DatasetDict out).", rich_help_panel=o.OUTPUT)] = None,
    as_json: o.Json = False,
) -> None:
    """Split a dataset so that no group and no exact or near duplicate crosses splits; write the files and a manifest.

    Ratios are met as fractions of rows (per label when stratified). Exit 0 when the split passes its checks
    (ratios within the tolerance, no leak in the written files), 1 when one fails, 2 on bad input.
    """
    from ..data.split import split_file
    from .render.data import split as render_split

    id_ = o.renamed(old_id, id_, old_name="--id", new_name="--id-field")
    result = split_file(data, out, _fields(text, label, group, id_, date), ratios=ratios, names=names,
                        stratify=stratify, seed=seed,
                        dedup=_config(near_threshold, shingle, ngram, strip_punctuation, seed, max_bucket),
                        tolerance=tolerance, skip_bad=skip_bad, force=force, progress=_bars(as_json), engine=engine,
                        address=address, workers=workers, output=output)
    o.emit(result, render_split, as_json)


def leaks(
    files: Annotated[list[str], typer.Argument(help="Split files, the training split first: TRAIN EVAL [TEST ...] "
            "(.jsonl, .csv, .tsv, .parquet, a Hugging Face dataset's folder or .arrow file), or a DatasetDict folder "
            "for its splits; with --engine ray each may be a directory, a glob or an s3:// gs:// path of shards.")],
    text: Text = None, label: Label = None, group: Group = None, id_: IdField = None, old_id: OldId = None,
    threshold: Annotated[float, typer.Option("--threshold", help="Largest tolerated rate of leaking rows in a later "
            "split (0 = any leak fails).", rich_help_panel=CHECK)] = 0.0,
    near_threshold: NearThreshold = 0.8, shingle: Shingle = "char", ngram: Ngram = 5,
    strip_punctuation: StripPunct = False,
    max_bucket: MaxBucket = 256,
    seed: Seed = 0,
    examples: Annotated[int, typer.Option("--examples", help="Example pairs shown per check and split pair.",
                                          rich_help_panel=CHECK)] = 3,
    skip_bad: SkipBad = False,
    pairs: Annotated[Path | None, typer.Option("--pairs", help="Write every leaking pair to this .csv, .tsv or .jsonl "
            "(check, file:line and id of both rows, detail); with --engine ray, a folder of JSONL shards and "
            "manifest.json.", rich_help_panel=o.OUTPUT)] = None,
    drop_to: Annotated[Path | None, typer.Option("--drop-to", help="Write the splits into this folder without the "
            "later splits' leaking rows, with a manifest and a re-check.", rich_help_panel=o.OUTPUT)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an earlier --drop-to set.",
                                        rich_help_panel=o.OUTPUT)] = False,
    drop_clusters: Annotated[bool, typer.Option("--drop-clusters", help="With --drop-to: drop every row of each exact "
            "or near-duplicate cluster that crosses splits, from every split (the training copies too), not only the "
            "later splits' leaking rows.", rich_help_panel=o.OUTPUT)] = False,
    engine: Annotated[str, typer.Option("--engine", help="local (this process) | ray (Ray Data, for splits in many "
            "shards; pip install 'campaign[ray]').", rich_help_panel=ENGINE)] = "local",
    address: RayAddress = None,
    workers: RayWorkers = None,
    as_json: o.Json = False,
) -> None:
    """Leaks between existing splits: exact and near duplicates, shared groups, the same text with different labels.

    The first file is indexed and every later file queried (then the second against the later ones). Exit 0 when
    no check exceeds the threshold, 1 when one does, 2 on bad input. With --engine ray the same checks run on a
    Ray cluster and give the same rows (each split's shards in path order); refs name the shard's file:line.
    """
    from ..data.leaks import check_files
    from ..errors import InputError
    from ..rows import hf_kind
    from .render.data import leaks as render_leaks

    id_ = o.renamed(old_id, id_, old_name="--id", new_name="--id-field")
    if len(files) < 2 and not (files and hf_kind(files[0]) == "dict"):
        raise InputError(f"leaks needs two or more split files, got {len(files)}; "
                         "e.g. campaign leaks train.jsonl test.jsonl")
    report = check_files(files, _fields(text, label, group, id_), skip_bad=skip_bad, threshold=threshold,
                         config=_config(near_threshold, shingle, ngram, strip_punctuation, seed, max_bucket),
                         examples=examples, pairs=pairs, drop_to=drop_to, force=force, drop_clusters=drop_clusters,
                         progress=_bars(as_json),
                         engine=engine, address=address, workers=workers)
    o.emit(report, render_leaks, as_json)


def usage(
    manifest: Annotated[Path, typer.Argument(help="The split_manifest.json written by `campaign split`, or the "
            "manifest.json of `campaign split --engine ray` (or their folder).")],
    use: Annotated[str | None, typer.Option(
        "--use", help="Record one use of this split (with --purpose).", rich_help_panel=USE)] = None,
    record: Annotated[str | None, typer.Option("--record", hidden=True, help="The old spelling of --use.")] = None,
    purpose: Annotated[str | None, typer.Option("--purpose", help="training | model-selection | final-test.",
                                                rich_help_panel=USE)] = None,
    note: Annotated[str, typer.Option("--note", help="What the use decided (kept in the ledger).",
                                      rich_help_panel=USE)] = "",
    run: Annotated[str | None, typer.Option("--run", help="Run id the use belongs to.", rich_help_panel=USE)] = None,
    max_final_uses: Annotated[int, typer.Option("--max-final-uses", help="Decisions the final split may inform before "
            "the check fails.", rich_help_panel=CHECK)] = 1,
    final_split: Annotated[str | None, typer.Option("--final-split", help="The held-out split (default: the manifest's "
            "last).", rich_help_panel=CHECK)] = None,
    as_json: o.Json = False,
) -> None:
    """The usage ledger of a split: which split each evaluation used and for what; warns when the final test split
    has informed more decisions than allowed. Works alike on a split in shards (`campaign split --engine ray`): each
    use binds to the sha256 of the split's shards, and a shard edited, added or removed since the split is refused.

    Exit 0 when the final split is within its limit, 1 when it is over (or was trained on), 2 on bad input.
    """
    from ..track.usage import use_split
    from .render import escape, progress_reporter
    from .render.data import usage as render_usage

    use = o.renamed(record, use, old_name="usage --record", new_name="usage --use")

    with progress_reporter("usage", enabled=not as_json) as tell:   # the split's files are hashed again
        tell(f"the ledger of {escape(manifest)}, the split's hashes checked")
        report = use_split(manifest, split=use, purpose=purpose, note=note, run=run,
                           max_final_uses=max_final_uses, final_split=final_split)
    o.emit(report, render_usage, as_json)
