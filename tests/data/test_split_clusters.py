"""The split's per-row clusters file (data/split_clusters.py): written with the split, named by the manifest with
its sha256, one line per input row whose cluster is its unit (its group, joined through duplicates)."""
from __future__ import annotations

import hashlib
import json

from campaign.data.read import Fields
from campaign.data.split import split_file

from .conftest import read_jsonl, write_jsonl


def test_clusters_file_holds_each_rows_unit_and_the_manifest_its_hash(tmp_path):
    # 12 rows in 6 users (2 each), distinct texts but one: row 4 (user u2) repeats row 7's text (user u3), so
    # u2 and u3 are one unit; 5 units in all, by hand: {u0}, {u1}, {u2, u3}, {u4}, {u5}
    words = ["alpha beta gamma delta epsilon", "zeta eta theta iota kappa", "lambda mu nu xi omicron",
             "pi rho sigma tau upsilon", "phi chi psi omega aleph", "beth gimel daleth he waw",
             "zayin heth teth yodh kaph", "lamedh mem nun samekh ayin", "pe tsade qoph resh shin",
             "taw one two three four", "five six seven eight nine", "ten eleven twelve thirteen fourteen"]
    rows = [{"id": f"r{i}", "user": f"u{i // 2}", "text": words[i]} for i in range(12)]
    rows[4]["text"] = rows[7]["text"]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "split"
    res = split_file(data, out, Fields(text=("text",), group=("user",), id="id"), ratios="50/50", names="a,b")
    manifest = json.loads((out / "split_manifest.json").read_text())
    f = out / "split_clusters.jsonl"
    entry = manifest["clusters"]
    assert entry["path"] == "split_clusters.jsonl" and entry["key"] == "id" and entry["rows"] == 12
    assert entry["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest() and entry["clusters"] == 5 == res.units
    lines = read_jsonl(f)
    assert [x["id"] for x in lines] == [r["id"] for r in rows]
    unit = {x["id"]: x["cluster"] for x in lines}
    hand = {"u0": 0, "u1": 1, "u2": 2, "u3": 2, "u4": 3, "u5": 4}
    for r in rows:
        for q in rows:
            assert (unit[r["id"]] == unit[q["id"]]) == (hand[r["user"]] == hand[q["user"]])
    split_of = {r["id"]: p.name for p in res.parts for r in read_jsonl(out / f"{p.name}.jsonl")}
    assert all(x["split"] == split_of[x["id"]] for x in lines)
    assert all(x["row"] == hashlib.sha256(r["text"].encode()).hexdigest()[:16] for x, r in zip(lines, rows,
                                                                                             strict=True))
