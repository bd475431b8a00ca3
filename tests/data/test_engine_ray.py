"""campaign leaks --engine ray: on a real local Ray (2 CPUs, started once for the module), the same exact, near,
group and label-conflict rows as the single-machine path, from one file per split or from many shards; outputs as
shards with a manifest; bad shards as one line and exit 2."""
from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.data.leaks import check_files
from campaign.data.read import Fields
from campaign.data.sketch import DedupConfig
from campaign.errors import InputError

from .conftest import edit, jaccard, read_jsonl, sentence, shingles, write_jsonl

ray = pytest.importorskip("ray")
pytest.importorskip("pyarrow")

FIELDS = Fields(label="label", group=("user",))


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


def _planted(seed: int = 5):
    """train (300 rows), eval and test rows with leaks planted at known eval/test rows:
    eval 0-9 exact copies of train rows 7, 37, 67, ... (0-2 with the other label), eval 10-14 near copies (1 word
    edited) of train rows 150-154, eval 15-20 rows of train users t200-t205, eval 21 empty, eval 22-49 clean;
    test 0-2 exact copies of eval 30-32, test 3 of train row 250, test 4-5 clean."""
    rng = random.Random(seed)
    train = [{"text": sentence(rng, 30, 50), "label": rng.choice("ab"), "user": f"t{i}"} for i in range(300)]
    evals = []
    for k in range(10):
        row = dict(train[7 + 30 * k], user=f"e{k}")
        if k < 3:
            row["label"] = "b" if row["label"] == "a" else "a"
        evals.append(row)
    evals += [dict(train[150 + k], text=edit(rng, train[150 + k]["text"], 1), user=f"n{k}") for k in range(5)]
    assert all(jaccard(shingles(train[150 + k]["text"]), shingles(evals[10 + k]["text"])) >= 0.8 for k in range(5))
    evals += [{"text": sentence(rng, 30, 50), "label": "a", "user": f"t{200 + k}"} for k in range(6)]
    evals.append({"text": "   ", "label": "a", "user": "empty"})
    evals += [{"text": sentence(rng, 30, 50), "label": "b", "user": f"c{k}"} for k in range(28)]
    test = [dict(evals[30 + k], user=f"x{k}") for k in range(3)] + [dict(train[250], user="x3")]
    test += [{"text": sentence(rng, 30, 50), "label": "b", "user": f"y{k}"} for k in range(2)]
    return train, evals, test


def _rows(report, check):
    c = report.check(check)
    return [(p.index, p.query, p.rows, p.links, p.linked, tuple(round(s, 12) for s in p.scores)) for p in c.pairs]


def test_one_file_per_split_gives_the_single_machine_report(local_ray, tmp_path):
    from campaign.data.ray import find_leaks_ray

    train, evals, test = _planted()
    paths = [write_jsonl(tmp_path / f"{n}.jsonl", rows) for n, rows in (("train", train), ("eval", evals),
                                                                       ("test", test))]
    config = DedupConfig(seed=3)
    single = check_files(paths, FIELDS, config=config)
    engine = find_leaks_ray([str(p) for p in paths], FIELDS, config=config)
    assert engine.to_dict() == single.to_dict()          # checks, rows, rates, links, examples with their refs
    for cid in ("leak.exact_duplicate", "leak.near_duplicate", "leak.group_overlap", "leak.label_conflict"):
        assert _rows(engine, cid) == _rows(single, cid)
    # and the planted rows, known by construction (train -> eval)
    first = {c: engine.check(c).pairs[0] for c in ("leak.exact_duplicate", "leak.near_duplicate",
                                                    "leak.group_overlap", "leak.label_conflict")}
    assert first["leak.exact_duplicate"].linked == tuple((7 + 30 * k, k) for k in range(10))
    assert [(i, q) for i, q in first["leak.near_duplicate"].linked] == [(150 + k, 10 + k) for k in range(5)]
    assert first["leak.group_overlap"].linked == tuple((200 + k, 15 + k) for k in range(6))
    assert first["leak.label_conflict"].linked == tuple((7 + 30 * k, k) for k in range(3))
    eval_test = engine.check("leak.exact_duplicate").pairs[2]
    assert (eval_test.index, eval_test.query, eval_test.linked) == ("eval.jsonl", "test.jsonl",
                                                                    ((30, 0), (31, 1), (32, 2)))
    # crowded buckets: 6 train copies of one text and a bucket cap of 2: the first 2 in row order are compared and
    # the search is noted as partial, on both paths alike
    rng = random.Random(2)
    text = sentence(rng, 40, 50)
    crowd = [write_jsonl(tmp_path / "crowd_train.jsonl", [{"text": sentence(rng)} for _ in range(5)]
                         + [{"text": text}] * 6),
             write_jsonl(tmp_path / "crowd_eval.jsonl", [{"text": edit(rng, text, 1)}, {"text": sentence(rng)}])]
    capped = DedupConfig(max_bucket=2)
    single = check_files(crowd, config=capped)
    engine = find_leaks_ray([str(p) for p in crowd], config=capped)
    assert engine.to_dict() == single.to_dict()
    assert engine.notes[0].startswith("crowd_train.jsonl -> crowd_eval.jsonl: ")
    assert "crowded LSH bucket(s) held more than 2 texts" in engine.notes[0]
    assert engine.check("leak.near_duplicate").pairs[0].linked == ((5, 0), (6, 0))


def _write_shards(tmp_path: Path, rows: list[dict], name: str, cuts: list[int], parquet_at: int | None = None):
    """rows cut into shards part-000... in a folder (shard `parquet_at` as Parquet); returns the folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / name
    d.mkdir()
    bounds = [0, *cuts, len(rows)]
    for k in range(len(bounds) - 1):
        chunk = rows[bounds[k]:bounds[k + 1]]
        if k == parquet_at:
            pq.write_table(pa.Table.from_pylist(chunk), d / f"part-{k:03d}.parquet")
        else:
            write_jsonl(d / f"part-{k:03d}.jsonl", chunk)
    return d


def test_shards_give_the_rows_of_the_concatenated_files_and_write_shard_sets(local_ray, tmp_path, cli):
    train, evals, test = _planted(seed=11)
    tdir = _write_shards(tmp_path, train, "train", [100, 180], parquet_at=1)
    edir = _write_shards(tmp_path, evals, "eval", [12, 30])
    xdir = _write_shards(tmp_path, test, "test", [2])
    assert sorted(p.name for p in xdir.iterdir()) == ["part-000.jsonl", "part-001.jsonl"]
    whole = [write_jsonl(tmp_path / f"{n}.jsonl", rows) for n, rows in (("train", train), ("eval", evals),
                                                                        ("test", test))]
    single = check_files(whole, FIELDS)
    r = cli("leaks", str(tdir), str(edir), str(tmp_path / "test" / "part-*.jsonl"), "--label", "label",
            "--group", "user", "--engine", "ray", "--pairs", str(tmp_path / "pairs"), "--drop-to",
            str(tmp_path / "clean"), "--json")
    assert r.code == 1, r.err                             # the inputs leak
    doc = r.json()
    for c_single, c_engine in zip(single.to_dict()["checks"], doc["checks"], strict=True):
        assert c_engine["status"] == c_single["status"] and c_engine["rows"] == c_single["rows"]
        assert [(p["rows"], p["links"]) for p in c_engine["pairs"]] == [(p["rows"], p["links"])
                                                                      for p in c_single["pairs"]]
    # refs name the shard and its line: eval row 10 is line 11 of eval's first shard; train row 150 is row 51
    # of the Parquet shard (train rows 100-179)
    near = next(c for c in doc["checks"] if c["id"] == "leak.near_duplicate")["pairs"][0]["examples"][0]
    assert near["index_ref"] == f"{tdir}/part-001.parquet row 51"
    assert near["query_ref"] == f"{edir}/part-000.jsonl:11"

    # the same folders as file:// URIs, listed and read through pyarrow's filesystems (as s3://, gs://): the same rows
    from campaign.data.ray import find_leaks_ray

    by_uri = find_leaks_ray([f"file://{tdir}", f"file://{edir}", f"file://{xdir}"], FIELDS)
    assert [(c["id"], c["rows"]) for c in by_uri.to_dict()["checks"]] == [(c["id"], c["rows"]) for c in doc["checks"]]
    assert by_uri.check("leak.near_duplicate").pairs[0].examples[0].query_ref == f"file://{edir}/part-000.jsonl:11"

    # --pairs: JSONL shards and a manifest naming their rows and hashes; the rows are the single path's pairs
    pm = json.loads((tmp_path / "pairs" / "manifest.json").read_text())
    listed = [json.loads(line) for s in pm["shards"] for line in (tmp_path / "pairs" / s["path"]).read_text()
              .splitlines()]
    for s in pm["shards"]:
        assert hashlib.sha256((tmp_path / "pairs" / s["path"]).read_bytes()).hexdigest() == s["sha256"]
    from campaign.data.leak_files import leak_pairs
    from campaign.data.read import read_dataset

    named = {d.name: d for d in (read_dataset(p, FIELDS) for p in whole)}
    expected = leak_pairs(single, named)
    assert pm["rows"] == len(listed) == len(expected)
    assert sorted((p["check"], p["detail"]) for p in listed) == sorted((p["check"], p["detail"]) for p in expected)
    exact_eval = {p["query_ref"] for p in listed if p["check"] == "leak.exact_duplicate" and p["query_split"] == "eval"}
    assert exact_eval == {f"{edir}/part-000.jsonl:{k + 1}" for k in range(10)}

    # --drop-to: each split's shards without the leaking rows, the dropped rows beside them, a manifest last
    out = tmp_path / "clean"
    fm = json.loads((out / "manifest.json").read_text())
    assert fm["recheck"]["status"] == "pass"
    kept = {s: [] for s in ("train", "eval", "test")}
    for s in fm["shards"]:
        p = out / s["path"]
        assert hashlib.sha256(p.read_bytes()).hexdigest() == s["sha256"]
        if p.suffix == ".jsonl":
            kept[s["split"]] += read_jsonl(p)
    assert kept["eval"] == evals[21:]                    # rows 0-20 leak (exact, near, group), 21 on are clean
    assert sum(s["dropped"] for s in fm["shards"]) == 21 + 4
    assert kept["test"] == test[4:]
    assert (out / "train" / "part-001.parquet").read_bytes() == (tdir / "part-001.parquet").read_bytes()


def test_bad_shards_are_one_line_and_leave_no_complete_output(local_ray, tmp_path, cli):
    train, evals, _ = _planted()
    tdir = _write_shards(tmp_path, train, "train", [150])
    edir = _write_shards(tmp_path, evals, "eval", [20])
    r = cli("leaks", str(tdir), str(tmp_path / "missing"), "--engine", "ray")
    assert r.code == 2 and r.err.count("\n") == 1 and "missing: no such file" in r.err
    r = cli("leaks", str(tdir), str(tmp_path / "eval" / "nothing-*.jsonl"), "--engine", "ray")
    assert r.code == 2 and "no file matches" in r.err
    # a shard whose records lack the text field (another schema): its file and line, exit 2, no manifest
    write_jsonl(edir / "part-002.jsonl", [{"body": "a text under another field", "label": "a", "user": "z"}])
    r = cli("leaks", str(tdir), str(edir), "--engine", "ray", "--drop-to", str(tmp_path / "clean"),
            "--pairs", str(tmp_path / "pairs"))
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert f"{edir}/part-002.jsonl:1: no text field 'text'" in r.err
    assert not (tmp_path / "clean" / "manifest.json").exists() and not (tmp_path / "pairs" / "manifest.json").exists()
    with pytest.raises(InputError, match="no records to check"):
        from campaign.data.ray import find_leaks_ray

        (edir / "part-002.jsonl").unlink()
        empty = tmp_path / "empty"
        empty.mkdir()
        (empty / "a.jsonl").write_text("")
        find_leaks_ray([str(tdir), str(empty)])


def test_without_ray_the_engine_says_how_to_install_it_and_the_cli_never_imports_it(tmp_path):
    code = ("import sys; sys.modules['ray'] = None\n"
            "from campaign.cli import main\n"
            f"main(['leaks', {str(tmp_path / 'a.jsonl')!r}, {str(tmp_path / 'b.jsonl')!r}, '--engine', 'ray'])")
    write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    write_jsonl(tmp_path / "b.jsonl", [{"text": "y"}])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "pip install 'campaign[ray]'" in r.stderr
    r = subprocess.run([sys.executable, "-c", "import sys\nfrom campaign.cli import main\n"
                        f"try:\n    main(['leaks', {str(tmp_path / 'a.jsonl')!r}, {str(tmp_path / 'b.jsonl')!r}])\n"
                        "except SystemExit:\n    pass\nassert 'ray' not in sys.modules"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # a cluster address that does not answer: one line at once (ray.init alone retries for minutes)
    r = subprocess.run([sys.executable, "-m", "campaign", "leaks", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"),
                        "--engine", "ray", "--address", "127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert (r.returncode == 2 and r.stderr.count("\n") == 1
            and "cannot reach the Ray cluster at '127.0.0.1:1'" in r.stderr)


def _copies_corpus(relabel: bool = False) -> list[dict]:
    """400 rows: every 10th row from 23 on copies an earlier row (every other one with an edit); with `relabel`,
    the copies at rows 43, 83, 123 carry another label than the row they copy (a label conflict, planted)."""
    rng = random.Random(1)
    rows: list[dict] = []
    for i in range(400):
        if i % 10 == 3 and i > 20:
            src = rows[rng.randrange(i)]
            rows.append(dict(src, text=edit(rng, src["text"], 1) if i % 20 == 3 else src["text"], id=f"r{i}"))
            if relabel and i in (43, 83, 123):
                rows[-1]["label"] = {"a": "b", "b": "c", "c": "a"}[src["label"]]
        else:
            rows.append({"text": sentence(rng, 30, 50), "label": rng.choice("abc"), "user": f"u{rng.randrange(150)}",
                         "id": f"r{i}"})
    return rows


def test_split_on_the_engine_writes_the_single_machine_split_as_shards(local_ray, tmp_path, cli):
    from campaign.data.split import split_file
    from campaign.data.split_clusters import read_clusters

    rows = _copies_corpus()
    write_jsonl(tmp_path / "all.jsonl", rows)
    (tmp_path / "shards").mkdir()
    for k in range(4):
        write_jsonl(tmp_path / "shards" / f"p{k}.jsonl", rows[k * 100:(k + 1) * 100])
    fields = Fields(label="label", group=("user",), id="id")
    single = split_file(tmp_path / "all.jsonl", tmp_path / "single", fields)
    r = cli("split", str(tmp_path / "shards"), "--out", str(tmp_path / "engine"), "--label", "label", "--group", "user",
            "--id-field", "id", "--engine", "ray", "--json")
    assert r.code == 0, r.err
    m = r.json()
    assert [s["rows"] for s in m["splits"]] == [p.rows for p in single.parts] == [320, 40, 40]
    assert m["units"] == single.units and m["leaks"]["status"] == "pass"
    # the same verdict from the same checks: the split's (split.label_conflict included: no copy here carries
    # another label) and the leak check of the written shards, at the top level
    assert [(c["id"], c["status"]) for c in m["checks"]] == [(c.id, c.status) for c in single.checks]
    assert ("split.label_conflict", "pass") in [(c["id"], c["status"]) for c in m["checks"]]
    assert m["status"] == single.status == "pass" and json.loads((tmp_path / "engine" / "manifest.json").read_text(
        ))["checks"] == m["checks"]
    # the per-row clusters: the same file as the local engine's, named by the manifest, read by --clusters-from
    engine_file = tmp_path / "engine" / "split_clusters.jsonl"
    assert engine_file.read_bytes() == (tmp_path / "single" / "split_clusters.jsonl").read_bytes()
    assert m["clusters"] == {k: single.clusters[k] for k in ("path", "sha256", "rows", "clusters", "key")}
    assert m["clusters"]["rows"] == 400 and m["clusters"]["clusters"] == m["units"]
    back = read_clusters(tmp_path / "engine" / "manifest.json")
    assert back.clusters == m["units"] and back.of_id == read_clusters(tmp_path / "single").of_id
    by_split: dict[str, list[dict]] = {}
    for s in m["shards"]:
        p = tmp_path / "engine" / s["path"]
        assert hashlib.sha256(p.read_bytes()).hexdigest() == s["sha256"] and len(read_jsonl(p)) == s["rows"]
        by_split.setdefault(s["split"], []).extend(read_jsonl(p))
    for name in ("train", "val", "test"):
        assert by_split[name] == read_jsonl(tmp_path / "single" / f"{name}.jsonl")
    # no unit straddles: every copy (same user, same or edited text) sits with its source
    where = {row["id"]: name for name, part in by_split.items() for row in part}
    users: dict[str, set[str]] = {}
    for row in rows:
        users.setdefault(row["user"], set()).add(where[row["id"]])
    assert all(len(s) == 1 for s in users.values())


def test_split_on_the_engine_warns_of_copies_with_another_label_as_the_local_engine(local_ray, tmp_path, cli):
    # planted: 3 copies (rows 43, 83, 123) carry another label than their source; both engines warn of the same
    # 3 duplicate clusters and name the rows (row 123 is line 24 of shard p1), and the verdict is a warning on both
    from campaign.data.split import split_file

    rows = _copies_corpus(relabel=True)
    write_jsonl(tmp_path / "all.jsonl", rows)
    (tmp_path / "shards").mkdir()
    for k in range(4):
        write_jsonl(tmp_path / "shards" / f"p{k}.jsonl", rows[k * 100:(k + 1) * 100])
    single = split_file(tmp_path / "all.jsonl", tmp_path / "single", Fields(label="label", group=("user",), id="id"))
    r = cli("split", str(tmp_path / "shards"), "--out", str(tmp_path / "engine"), "--label", "label", "--group", "user",
            "--id-field", "id", "--engine", "ray", "--json")
    assert r.code == 0, r.err
    m = r.json()
    got = next(c for c in m["checks"] if c["id"] == "split.label_conflict")
    want = next(c for c in single.checks if c.id == "split.label_conflict")
    assert got["status"] == want.status == "warn" and m["status"] == single.status == "warn"
    # the 3 planted clusters, 7 rows (one of them holds a third copy); the engine names rows by shard and line
    head = "3 duplicate cluster(s) (7 rows) carry different labels"
    assert got["seen"].startswith(head) and want.seen.startswith(head)
    assert "p0.jsonl:44 (id r43)" in got["seen"] and "p1.jsonl:24 (id r123)" in got["seen"]


def test_the_usage_ledger_of_a_split_in_shards_counts_uses_of_its_shards_and_refuses_changed_shards(local_ray,
                                                                                                    tmp_path, cli):
    rng = random.Random(4)
    (tmp_path / "shards").mkdir()
    for k in range(3):
        write_jsonl(tmp_path / "shards" / f"p{k}.jsonl",
                    [{"text": sentence(rng, 20, 40), "label": rng.choice("ab")} for _ in range(60)])
    out = tmp_path / "engine"

    def split(*extra: str) -> None:
        r = cli("split", str(tmp_path / "shards"), "--out", str(out), "--label", "label", "--engine", "ray", *extra)
        assert r.code == 0, r.err

    def usage(*extra: str):
        return cli("usage", str(out), *extra, "--json")

    split()
    r = usage("--use", "test", "--purpose", "final-test", "--note", "the report")
    assert r.code == 0, r.err
    assert r.json()["splits"] == ["train", "val", "test"] and r.json()["final_decisions"] == 1
    r = usage("--use", "test", "--purpose", "model-selection")
    assert r.code == 1 and r.json()["final_decisions"] == 2          # over the limit of one: the check fails
    assert r.json()["counts"]["test"] == {"training": 0, "model_selection": 1, "final_test": 1}
    assert r.json()["ledger"] == str(out / "manifest.usage.jsonl") and r.json()["entries"][0]["note"] == "the report"
    # the final-test use is a run record holding the test split's folder of shards
    from campaign.track.store import Store

    run = Store(tmp_path / ".campaign").read(r.json()["entries"][0]["run"])
    assert [(a.kind, a.path) for a in run.artifacts] == [("evaluation:final_test", str((out / "test").resolve()))]

    # a re-split (another seed) writes other test shards: the ledger stays, and its uses count against the new test
    # split exactly when they saw rows that are in it (uses bind to the rows' texts)
    def test_texts() -> set[str]:
        return {json.loads(x)["text"] for f in (out / "test").iterdir() for x in f.read_text().splitlines()}

    old_test, old_bytes = test_texts(), {f.name: f.read_bytes() for f in (out / "test").iterdir()}
    split("--seed", "5", "--force")
    assert {f.name: f.read_bytes() for f in (out / "test").iterdir()} != old_bytes
    shared = len(old_test & test_texts())
    r = usage()
    assert len(r.json()["entries"]) == 2 and r.json()["final_decisions"] == (2 if shared else 0)
    assert r.code == (1 if shared else 0)
    before = r.json()["final_decisions"]
    assert usage("--use", "test", "--purpose", "final-test").json()["final_decisions"] == before + 1

    # a shard edited, added or removed after the split: refused in one line naming the shard and the change,
    # and nothing is recorded
    ledger = (out / "manifest.usage.jsonl").read_bytes()
    shard = sorted((out / "test").iterdir())[1]
    kept = shard.read_bytes()
    with open(shard, "a", encoding="utf-8") as f:
        f.write('{"text": "one more row slipped in", "label": "a"}\n')
    added = out / "val" / "extra.jsonl"
    for change, undo, said in ((None, lambda: shard.write_bytes(kept), f"{shard}: changed since the split"),
                               (lambda: added.write_text(""), added.unlink, f"{added}: added since the split"),
                               (shard.unlink, lambda: shard.write_bytes(kept), f"{shard}: missing")):
        if change:
            change()
        for args in ((), ("--use", "val", "--purpose", "training")):
            r = cli("usage", str(out), *args)
            assert r.code == 2 and r.err.count("\n") == 1 and said in r.err, r.err
        undo()
    assert (out / "manifest.usage.jsonl").read_bytes() == ledger
    assert usage().json()["final_decisions"] == before + 1           # restored: read as before


def test_a_worker_killed_mid_run_is_retried_and_the_report_unchanged(local_ray, tmp_path, monkeypatch):
    """The first worker process to start sketching a shard SIGKILLs itself there, at the same point on any machine
    however loaded (a watcher polling for the worker could miss a short task or fire at any stage); Ray retries the
    task and the report is the one of an uninterrupted run."""
    import os
    import signal

    from campaign.data.ray import find_leaks_ray

    engine = sys.modules[find_leaks_ray.__module__]
    sketch, driver, marker = engine.sketch_shards, os.getpid(), tmp_path / "killed"

    def sketch_or_die(batch, **kw):   # pickled by value to the workers (a local function): it runs there
        if os.getpid() != driver:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)    # exactly one worker wins the file
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)
        return sketch(batch, **kw)

    train, evals, test = _planted(seed=7)
    tdir = _write_shards(tmp_path, train, "train", list(range(15, 300, 15)))
    edir = _write_shards(tmp_path, evals, "eval", [25])
    before = find_leaks_ray([str(tdir), str(edir)], FIELDS)
    monkeypatch.setattr(engine, "sketch_shards", sketch_or_die)
    after = find_leaks_ray([str(tdir), str(edir)], FIELDS)
    assert marker.exists() and int(marker.read_text()) != driver, "no sketching worker killed itself"
    assert after.to_dict() == before.to_dict()
