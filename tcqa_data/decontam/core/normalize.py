"""Text normalization shared by the index build and by queries.

``janitor`` reproduces lm-eval's ``Janitor.normalize_string`` (ASCII lowercase, delete
``string.punctuation``) followed by ``str.split()``, so our n-grams equal lm-eval's 13-grams.
``unicode`` is a Unicode-aware variant: NFKC, casefold, delete every Unicode punctuation char.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from functools import lru_cache

from tcqa_data.errors import ConfigError

SCHEMES = ("janitor", "unicode")

_JANITOR_TABLE = str.maketrans(
    string.ascii_lowercase + string.ascii_uppercase, string.ascii_lowercase * 2, string.punctuation
)
# Same translation on UTF-8 bytes: only ASCII bytes change, and every byte of a multibyte
# UTF-8 sequence is >= 0x80, so translating bytes equals translating the str. Every ASCII byte
# str.split() splits on (\t\n\v\f\r, \x1c-\x1f, space) becomes a space, so the hashing code
# finds token boundaries with one comparison; tokens are unchanged.
JANITOR_BYTES_TABLE = bytes(range(256)).translate(
    bytes.maketrans(
        (string.ascii_uppercase + "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f").encode("ascii"),
        (string.ascii_lowercase + " " * 9).encode("ascii"),
    )
)
JANITOR_BYTES_DELETE = string.punctuation.encode("ascii")

# Non-ASCII characters that str.split() treats as whitespace (str.isspace()), written out:
# computing them scans 1.1 M code points (~0.1 CPU-s per process); a test checks the list.
UNICODE_WHITESPACE = ("\x85", "\xa0", "\u1680", *map(chr, range(0x2000, 0x200B)), "\u2028", "\u2029",
                      "\u202f", "\u205f", "\u3000")

_TOKEN_RE = re.compile(r"\S+")


def check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown normalization {scheme!r}; choose one of {', '.join(SCHEMES)}")
    return scheme


@lru_cache(maxsize=1)
def _unicode_punct_table() -> dict[int, None]:
    return {c: None for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)).startswith("P")}


def normalize(text: str, scheme: str = "janitor") -> str:
    """The normalized text whose ``str.split()`` gives the tokens."""
    if scheme == "janitor":
        return text.translate(_JANITOR_TABLE)
    check_scheme(scheme)
    return unicodedata.normalize("NFKC", text).casefold().translate(_unicode_punct_table())


def janitor_bytes(text: str) -> bytes:
    """``normalize(text, "janitor")`` on the UTF-8 bytes (surrogatepass), ASCII whitespace as
    spaces: ``bytes.split()`` gives the same tokens up to non-ASCII whitespace, which the hashing
    turns into spaces later; ~15x faster than ``str.translate``."""
    return text.encode("utf-8", "surrogatepass").translate(JANITOR_BYTES_TABLE, JANITOR_BYTES_DELETE)


def tokenize(text: str, scheme: str = "janitor") -> list[str]:
    """Word tokens of ``normalize(text, scheme)``; n-grams are built over these."""
    if scheme == "janitor":
        # str.split() of the decoded bytes also splits on non-ASCII whitespace: the same tokens;
        # alignment tokenizes every candidate corpus doc
        return janitor_bytes(text).decode("utf-8", "surrogatepass").split()
    return normalize(text, scheme).split()


def token_char_spans(text: str, scheme: str = "janitor") -> list[tuple[int, int]]:
    """``(start, end)`` character span in ``text`` of each token ``tokenize`` returns.

    Normalization never merges or splits whitespace-separated chunks for ``janitor`` (it only
    lowercases and deletes ASCII punctuation), so each token is one chunk of the original text;
    spans are trimmed of deleted leading/trailing characters for tighter highlighting.
    """
    check_scheme(scheme)
    spans: list[tuple[int, int]] = []
    for m in _TOKEN_RE.finditer(text):
        chunk = m.group(0)
        ntoks = len(normalize(chunk, scheme).split())
        if ntoks == 0:
            continue
        start, end = m.start(), m.end()
        if scheme == "janitor":
            while text[start] in string.punctuation:
                start += 1
            while text[end - 1] in string.punctuation:
                end -= 1
        spans.extend([(start, end)] * ntoks)
    # NFKC can in rare cases merge or split chunks differently from the whole text; keep the
    # contract len(spans) == len(tokens) by padding with / trimming to the last span.
    if scheme != "janitor":
        n = len(tokenize(text, scheme))
        if len(spans) > n:
            spans = spans[:n]
        elif len(spans) < n:
            spans.extend([spans[-1] if spans else (0, len(text))] * (n - len(spans)))
    return spans
