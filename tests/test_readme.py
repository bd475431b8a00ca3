"""The README's and the guides' terminal examples print what they show (tests/readme_examples.py has the rules);
the README stays a map, and every relative link of the documents leads somewhere."""
from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from tests.readme_examples import README, ROOT, documents, examples, expected, run, scratch, update

EXAMPLES = [(doc, ex) for doc in documents() for ex in examples(doc.read_text(encoding="utf-8"))]
GUIDES = ("memory.md", "trust.md", "before-training.md", "variants.md", "budget.md")
_RUNS: dict[str, tuple[int, list[str], str]] = {}


def _run_once(command: str) -> tuple[int, list[str], str]:
    """Run a command once per session: the README shows the head of outputs its guides show whole."""
    if command not in _RUNS:
        with scratch():
            _RUNS[command] = run(command)
    return _RUNS[command]


def test_readme_compares_its_examples():
    compared = [(d, e) for d, e in EXAMPLES if e.shown is not None and not e.gpu]
    in_readme = [e for d, e in compared if d == README]
    assert len(in_readme) >= 5     # one per question of the guide
    assert any(e.command.startswith("memory ") for d, e in compared) and any(e.command.startswith("kv ")
                                                                             for d, e in compared)
    for guide in GUIDES:           # each question's guide compares what it shows
        assert any(d.name == guide for d, _ in compared), guide


def test_readme_is_a_map():
    """What it is, the two commands, each question with one example and a link to its guide: at most 300 lines."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "make plan" in text and "make test" in text
    for guide in GUIDES:
        assert f"(docs/{guide})" in text, guide


@pytest.mark.parametrize("doc,ex", [(d, e) for d, e in EXAMPLES if not e.gpu],
                         ids=lambda v: v.stem if isinstance(v, Path) else f"line{v.line}-{v.command.split()[0]}")
def test_readme_example_prints_what_it_shows(doc, ex):
    code, printed, err = _run_once(ex.command)
    assert code in (0, 1), err
    if ex.shown is not None:
        want = expected(ex, printed)
        diff = "\n".join(difflib.unified_diff(list(ex.shown), want, doc.name, "printed", lineterm=""))
        assert list(ex.shown) == want, (f"{doc.relative_to(ROOT)} line {ex.line} is stale; run python -m "
                                        f"tests.readme_examples --update\n{diff}")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than - and _ dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        slug = _slug(heading)
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def test_every_relative_link_of_the_documents_leads_to_a_file_and_heading():
    broken = []
    for doc in [*documents(), ROOT / "CONTRIBUTING.md"]:
        text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            name, _, anchor = target.partition("#")
            path = (doc.parent / name).resolve() if name else doc
            if not path.exists() or anchor and (path.suffix != ".md" or anchor not in _anchors(path)):
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken


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
    """The notebook page (docs/library.md) calls the library as a notebook would, from a scratch folder with
    examples/; it is the documents' one Python block."""
    import contextlib
    import io

    blocks = [(doc, block) for doc in documents()
              for block in re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)]
    notebook = [(doc, block) for doc, block in blocks if "campaign.trace_memory" in block]
    assert len(notebook) == 1
    # every other block is an excerpt of a script the tests run (tests/test_examples.py): each of its lines is there
    for doc, block in blocks:
        if (doc, block) in notebook:
            continue
        script = re.search(r"`(examples/[\w/]+\.py)`", doc.read_text(encoding="utf-8")).group(1)
        lines = (ROOT / script).read_text(encoding="utf-8").splitlines()
        for line in block.splitlines():
            assert not line.strip() or line in lines, f"{doc.name}: {line!r} is not in {script}"
    doc, block = notebook[0]
    pytest.importorskip("torch")
    out = io.StringIO()
    with scratch(), contextlib.redirect_stdout(out):
        exec(compile(block, str(doc), "exec"), {})
    printed = out.getvalue()
    # the example's planted facts (docs/trust.md): 80/10/10 of 420 rows, 5 re-sent tickets
    assert "True [('train', 336), ('val', 42), ('test', 42)]" in printed
    assert "('leak.near_duplicate', 'fail', 5)" in printed and "\nconvincing\n" in printed
    assert "True ['step.finite_loss', 'step.initial_loss', 'step.scheduler_bound'" in printed
    assert printed.splitlines()[-2] == "[('baseline', 'completed')]"
    # the quant example: bf16 then int8 on the same batches, the bytes as docs/variants.md shows them; perplexity
    # moves in its third decimal with the CPU's kernel path (525.29 on one machine, 525.2954 on another), so the
    # page prints one decimal
    assert printed.splitlines()[-1].startswith("True [('bf16', 853312, 525.3, None), ('int8', 568640, 525.3, 0.8")


QUANT = [e for _, e in EXAMPLES if e.command.startswith("quant ") and e.shown is not None]


# the attention the examples' bf16 reference runs (batch 16, 4 heads, 64 tokens, head size 32)
_BF16_SDPA = ("import torch; q = torch.randn(16, 4, 64, 32, dtype=torch.bfloat16); "
              "torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)")


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_readme_quant_examples_print_the_same_on_every_kernel_path(capability):
    """PyTorch picks its CPU kernels by the processor's features; a README figure must not depend on them.
    ATEN_CPU_CAPABILITY forces a path (read at import), so each path runs in its own process."""
    import json
    import subprocess
    import sys

    assert QUANT
    env = {**__import__("os").environ, "ATEN_CPU_CAPABILITY": capability}
    probe = subprocess.run([sys.executable, "-c", _BF16_SDPA], capture_output=True, text=True, env=env)
    # PyTorch picks its bf16 attention kernel by the hardware (AMX, for one) and packs its input with the forced
    # path's code, which refuses ("pack_vnni2 is only supported when avx512..."): an example with a bf16 model
    # cannot run on that path on such a processor, whatever campaign does; the others are still compared
    bf16_refused = probe.returncode != 0 and "pack_vnni2" in probe.stderr
    code = ("import json, sys; from tests.readme_examples import run, scratch\n"
            "out = []\n"
            "for command in json.loads(sys.argv[1]):\n"
            "    with scratch():\n"
            "        out.append(run(command)[1:])\n"
            "print(json.dumps(out))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps([e.command for e in QUANT])], capture_output=True,
                          text=True, env=env, cwd=README.parent, check=True)
    compared = 0
    for ex, (printed, err) in zip(QUANT, json.loads(done.stdout.splitlines()[-1]), strict=True):
        if bf16_refused and "pack_vnni2" in err:
            continue
        assert list(ex.shown) == expected(ex, printed), (capability, ex.line)
        compared += 1
    if compared < len(QUANT):
        assert bf16_refused
        if not compared:
            pytest.skip(f"PyTorch's bf16 attention cannot run under ATEN_CPU_CAPABILITY={capability} here")
