"""The watched run's overhead (issue 47): seconds per optimizer update of a script watched by every observer of
`campaign check -- python SCRIPT` against the same script with only the update counter that stops it (--bare),
alternated, best of each; and the wall time of the whole check.

    .venv/bin/python benchmarks/watch_speed.py [SCRIPT ARGS...]    (default: examples/watch/train_gpt.py)
    WATCH_UPDATES=8 .venv/bin/python benchmarks/watch_speed.py benchmarks/watch_train_gpt2.py --tokens 128
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [str(ROOT / "examples" / "watch" / "train_gpt.py"), "--max_iters", "200", "--eval_interval", "1000"]


def per_update(script: list[str], bare: bool, updates: int, out: Path) -> float:
    cmd = [sys.executable, "-m", "campaign.train.watch", "--out", str(out), "--updates", str(updates),
           *(["--bare"] if bare else []), "--", *script]
    subprocess.run(cmd, check=True, capture_output=True)
    return float(json.loads(out.read_text())["seconds_per_update"])


def main() -> None:
    script = sys.argv[1:] or DEFAULT
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "o.json"
        bare, full = [], []
        n = int(os.environ.get("WATCH_UPDATES", "40"))
        for i in range(3):      # alternated, each mode first in turn: the machine's load drifts
            for watched in ((False, True) if i % 2 == 0 else (True, False)):
                (full if watched else bare).append(per_update(script, not watched, n, out))
    b, f = min(bare), min(full)
    print(f"seconds per update, best of 3 runs of {n} updates: bare {b:.4f}, watched {f:.4f}: "
          f"overhead {f / b - 1:+.1%}")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "campaign", "check", "--no-resume", "--", "python", *script],
                   capture_output=True)
    print(f"campaign check -- python {' '.join(script)}: {time.perf_counter() - start:.1f} s wall")


if __name__ == "__main__":
    main()
