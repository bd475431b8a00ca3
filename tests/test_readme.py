"""The README's terminal examples print what the README shows (tests/readme_examples.py has the rules)."""
from __future__ import annotations

import difflib

import pytest

from tests.readme_examples import README, examples, expected, run, scratch, update

EXAMPLES = examples(README.read_text(encoding="utf-8"))


def test_readme_compares_its_examples():
    compared = [e for e in EXAMPLES if e.shown is not None and not e.gpu]
    assert len(compared) >= 4
    assert any(e.command.startswith("memory ") for e in compared) and any(e.command.startswith("kv ") for e in compared)


@pytest.mark.parametrize("ex", [e for e in EXAMPLES if not e.gpu], ids=lambda e: f"line{e.line}-{e.command.split()[0]}")
def test_readme_example_prints_what_it_shows(ex):
    with scratch():
        code, printed, err = run(ex.command)
    assert code in (0, 1), err
    if ex.shown is not None:
        want = expected(ex, printed)
        diff = "\n".join(difflib.unified_diff(list(ex.shown), want, "README", "printed", lineterm=""))
        assert list(ex.shown) == want, (f"README line {ex.line} is stale; run python -m tests.readme_examples "
                                        f"--update\n{diff}")


SAMPLE = """Intro.

```text
$ campaign cards --vendor amd
a line that is not printed
$ campaign models deepseek-v3
first line, stale
...
$ campaign guide
$ campaign measure gpt2 --out measured.json    # on the rented card
```

```bash
$ campaign cards
```
"""


def test_examples_are_parsed_with_their_shown_output():
    ex = examples(SAMPLE)
    assert [e.command for e in ex] == ["cards --vendor amd", "models deepseek-v3", "guide",
                                       "measure gpt2 --out measured.json"]
    assert ex[0].shown == ("a line that is not printed",) and not ex[0].head_only
    assert ex[1].shown == ("first line, stale",) and ex[1].head_only
    assert ex[2].shown is None and ex[3].gpu and ex[0].line == 4


def test_update_rewrites_stale_outputs_from_the_commands(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(SAMPLE, encoding="utf-8")
    assert update(path) == ["cards --vendor amd", "models deepseek-v3"]
    text = path.read_text(encoding="utf-8")
    assert "not printed" not in text and "first line, stale" not in text
    with scratch():
        _, cards, _ = run("cards --vendor amd")
        _, model, _ = run("models deepseek-v3")
    assert "\n".join(cards) in text and "MI300X" in text
    assert f"$ campaign models deepseek-v3\n{model[0]}\n...\n$ campaign guide\n" in text
    assert text.endswith("```bash\n$ campaign cards\n```\n")  # only text blocks are examples
    assert update(path) == []  # now current


def test_the_readme_python_block_runs():
    """The notebook section calls the library as a notebook would, from a scratch folder with examples/."""
    import contextlib
    import io
    import re

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks and "campaign.trace_memory" in blocks[0]
    pytest.importorskip("torch")
    out = io.StringIO()
    with scratch(), contextlib.redirect_stdout(out):
        exec(compile(blocks[0], "README.md", "exec"), {})
    printed = out.getvalue()
    # the example's planted facts (README's data section): 80/10/10 of 420 rows, 5 re-sent tickets
    assert "True [('train', 336), ('val', 42), ('test', 42)]" in printed
    assert "('leak.near_duplicate', 'fail', 5)" in printed and "\nconvincing\n" in printed
    assert "True ['step.finite_loss', 'step.initial_loss', 'step.finite_grads'" in printed
    assert printed.splitlines()[-2] == "[('baseline', 'completed')]"
    # the quant example: bf16 then int8 on the same batches, the bytes as the README's quant section shows them
    assert printed.splitlines()[-1].startswith("True [('bf16', 853312, 525.29, None), ('int8', 568640, 525.3, 0.8")


QUANT = [e for e in EXAMPLES if e.command.startswith("quant ") and e.shown is not None]


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_readme_quant_examples_print_the_same_on_every_kernel_path(capability):
    """PyTorch picks its CPU kernels by the processor's features; a README figure must not depend on them.
    ATEN_CPU_CAPABILITY forces a path (read at import), so each path runs in its own process."""
    import json
    import subprocess
    import sys

    assert QUANT
    code = ("import json, sys; from tests.readme_examples import run, scratch\n"
            "out = []\n"
            "for command in json.loads(sys.argv[1]):\n"
            "    with scratch():\n"
            "        out.append(run(command)[1])\n"
            "print(json.dumps(out))")
    env = {**__import__("os").environ, "ATEN_CPU_CAPABILITY": capability}
    done = subprocess.run([sys.executable, "-c", code, json.dumps([e.command for e in QUANT])], capture_output=True,
                          text=True, env=env, cwd=README.parent, check=True)
    for ex, printed in zip(QUANT, json.loads(done.stdout.splitlines()[-1]), strict=True):
        assert list(ex.shown) == expected(ex, printed), (capability, ex.line)
