"""An artifact's kind decides what ships in the hand-over bundle: an unknown or misspelt kind is refused."""
from __future__ import annotations

from campaign.track.run import end_run, start_run


def test_unknown_kinds_are_refused_with_the_nearest(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = start_run("r", with_torch=False)
    (tmp_path / "ckpt.safetensors").write_bytes(b"\x00" * 8)
    for kind, near in (("chekpoint", "'checkpoint'"), ("weights", None), ("", None), ("prediction", "'predictions'")):
        r = cli("run", "artifact", run.id, "ckpt.safetensors", "--kind", kind)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1, (kind, r.err)
        assert "unknown artifact kind" in r.err and "checkpoint" in r.err
        if near:
            assert f"did you mean {near}" in r.err
    assert cli("runs", "show", run.id, "--json").json()["artifacts"] == []  # nothing recorded
    # a known kind, and a known kind with a label
    assert cli("run", "artifact", run.id, "ckpt.safetensors", "--kind", "checkpoint:step-500").code == 0
    end_run(run.id, "completed")
