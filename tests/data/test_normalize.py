"""Normalization and content hashes: what counts as the same text, and hashes stable across processes."""
from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys

from campaign.data.normalize import NORMALIZER_VERSION, content_hash, normalize_text, normalize_texts


def test_nfkc_casefold_and_whitespace():
    assert normalize_text("Ｈｅｌｌｏ，\t  ＷＯＲＬＤ\n") == "hello, world"  # full-width forms, tab, newline
    assert normalize_text("Straße") == "strasse"  # casefold, not lower()
    assert normalize_text("ﬁne ½") == "fine 1⁄2"  # ligature and vulgar fraction decomposed by NFKC
    assert normalize_text("  a \u00a0 b  ") == "a b"  # no-break space is whitespace


def test_never_drops_stopwords_or_negations():
    assert normalize_text("I do NOT like it") == "i do not like it"
    assert normalize_text("I do NOT like it") != normalize_text("I do like it")
    assert normalize_text("Don't stop", strip_punctuation=True) == "dont stop"
    assert normalize_text("no, never!", strip_punctuation=True) == "no never"


def test_punctuation_stripping_is_optional():
    assert normalize_text("Hello, world!") == "hello, world!"
    assert normalize_text("Hello, world!", strip_punctuation=True) == "hello world"
    assert normalize_text("«quoted»—dash", strip_punctuation=True) == "quoted dash"


def test_content_hash_is_sha256_of_the_normalized_utf8():
    assert content_hash("  Hello,   WORLD ") == hashlib.sha256(b"hello, world").hexdigest()
    assert content_hash("Café") == hashlib.sha256("café".encode()).hexdigest()
    assert content_hash("a b") != content_hash("a  b!")


def test_content_hash_is_the_same_in_processes_with_different_hash_seeds():
    code = "from campaign.data.normalize import content_hash; print(content_hash('Ünïcode  TEXT'))"
    outs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                check=True).stdout.strip())
    assert outs == {hashlib.sha256("ünïcode text".encode()).hexdigest()}


def test_version_names_the_steps():
    assert "NFKC" in NORMALIZER_VERSION and "casefold" in NORMALIZER_VERSION


def test_normalize_texts_equals_normalize_text():
    rng = random.Random(3)
    pieces = ["a", "B", " ", "  ", "\t", "\x00", "\x1c", "é", "İ", ".", "'", "\n", "\x7f", "~", "ß"]
    batches = [["".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(0, 5))]
               for _ in range(3000)]
    batches += [["Hello World", "a b c"], ["Hello  World", "x"], [" lead", "x"], ["trail ", "x"], ["", "x"]]
    for batch in batches:
        for strip in (False, True):
            assert normalize_texts(batch, strip_punctuation=strip) == \
                [normalize_text(t, strip_punctuation=strip) for t in batch], batch
    assert normalize_texts(["Hello WORLD", "Foo bar"]) == ["hello world", "foo bar"]   # by hand
