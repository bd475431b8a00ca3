"""Text normalization for duplicate detection, and a content hash that is the same on every run and machine.

Normalizing makes "Hello,  World" and "hello, world" the same document for exact-duplicate matching. It never
removes words: stopwords and negations ("not", "no", "never") change a label, so they stay.
"""
from __future__ import annotations

import hashlib
import sys
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

# Bump when the output of normalize_text() changes for any input: split manifests record it, so a later leak check
# can tell whether two manifests hashed their texts the same way.
NORMALIZER_VERSION = "campaign-normalize/1 (NFKC, casefold, NFKC, whitespace collapse)"

# Apostrophes inside words are deleted rather than spaced ("don't" -> "dont", not "don t"), so a negation stays one
# token. U+2019 is the typographic apostrophe; NFKC leaves it alone.
_APOSTROPHES = "'\u2019\u02bc"


@lru_cache(maxsize=1)
def _punctuation_table() -> dict[int, int | None]:
    """str.translate table: every Unicode punctuation code point (category P*) -> space, apostrophes -> deleted."""
    table: dict[int, int | None] = {}
    for cp in range(sys.maxunicode + 1):
        if unicodedata.category(chr(cp)).startswith("P"):
            table[cp] = 0x20
    for ch in _APOSTROPHES:
        table[ord(ch)] = None
    return table


def normalize_text(text: str, *, strip_punctuation: bool = False) -> str:
    """Unicode NFKC, casefold, (optionally) punctuation to spaces, whitespace runs to one space, trimmed.

    Args:
        text: any string.
        strip_punctuation: replace Unicode punctuation (category P*) by a space; apostrophes are deleted.
    Returns:
        The normalized text; words are never removed (stopwords and negations are kept).
    """
    if text.isascii():  # NFKC leaves ASCII alone and casefold is lower() there (O(1) check: CPython's flag)
        out = text.lower()
    else:  # casefold can produce characters that are not NFKC-normal (e.g. U+0130 -> "i̇"), hence NFKC twice
        out = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    if strip_punctuation:
        out = out.translate(_punctuation_table())
    return " ".join(out.split())


# The bytes of an ASCII text that is already normalized once lowered: printable ASCII (space to tilde).
_PRINTABLE = bytes(range(0x20, 0x7F))


def normalize_texts(texts: Sequence[str], *, strip_punctuation: bool = False) -> list[str]:
    """[normalize_text(t) for t in texts], in a few passes over the joined batch when it is printable ASCII whose
    only spaces are single spaces between words (the common case: no per-text split and join)."""
    texts = list(texts)
    if not strip_punctuation and len(texts) > 1:
        joined = "\x00".join(texts)
        if joined.isascii():
            raw = joined.encode("ascii")
            # only printable bytes besides the n - 1 separators (no tab, newline or NUL inside a text), and no
            # space doubled or at a text's edge
            if raw.translate(None, _PRINTABLE) == b"\x00" * (len(texts) - 1):
                spaced = raw.replace(b"\x00", b" ")
                if b"  " not in spaced and not spaced.startswith(b" ") and not spaced.endswith(b" "):
                    return joined.lower().split("\x00")
    return [normalize_text(t, strip_punctuation=strip_punctuation) for t in texts]


def normalizer_id(*, strip_punctuation: bool = False) -> str:
    """The version string plus the options, as recorded in manifests."""
    return NORMALIZER_VERSION + (" + punctuation stripped" if strip_punctuation else "")


def content_hash(text: str, *, strip_punctuation: bool = False) -> str:
    """SHA-256 (hex) of the normalized text's UTF-8 bytes: equal for texts that differ only in case, width,
    compatibility forms or spacing; stable across runs, processes and machines (never Python's hash())."""
    data = normalize_text(text, strip_punctuation=strip_punctuation).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()
