"""Splitting raw text into words, by a splitter chosen by name (`word_splitter`; `build_word_splitter`):

- `"moses"` (default): a regular expression approximating the Moses tokenisation of ELMo's training data, the
  1 Billion Word Benchmark: punctuation split off, contractions split as `don't -> don 't`, `it's -> it 's`. It
  reproduces the tokenisation of all 30 sentences of AllenNLP's fixture (taken from that data).
- `"ptb"`: the same, but contractions split the Penn-Treebank way (`don't -> do n't`); see `PTB_WORD_PATTERN` for
  what both patterns do and do not do.
- `"whitespace"`: split on whitespace only, for text that is already tokenised.
- `"bert"`: `tokenizers.pre_tokenizers.BertPreTokenizer` (whitespace and every punctuation character).
- `"kiwi"` / `"mecab"`: Korean morphemes (`은행에` -> `은행 에`) from the kiwipiepy / python-mecab-ko analyser,
  optional extras (`pip install 'elmo-hf[kiwi]'`); see `MorphemeWordSplitter` and docs/guide/korean.md.

A remote-code file (copied next to a checkpoint for `trust_remote_code=True`): it imports only `tokenizers`, `choices_elmo.py` and
`validation_elmo.py`; the Korean analysers are imported with `importlib` when a splitter uses them (transformers'
remote-code check does not ask for optional packages).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterable
from typing import Any

from tokenizers import Regex, pre_tokenizers

from .choices_elmo import WORD_SPLITTERS
from .validation_elmo import check_choice

# ----------------------------------------------------------------------------------------------------------------
# Word splitters
# ----------------------------------------------------------------------------------------------------------------
_WORD_CHARACTER = r"[\p{L}\p{M}\p{N}]"  # letters, combining marks, digits
_NOT_FOLLOWED_BY_WORD_CHARACTER = r"(?![\p{L}\p{M}\p{N}])"
_APOSTROPHE = r"['’]"  # ASCII apostrophe and U+2019 RIGHT SINGLE QUOTATION MARK
_CLITIC = r"(?i:s|m|d|ll|re|ve)"  # 's 'm 'd 'll 're 've
_NOT_SUFFIX = rf"(?i:n{_APOSTROPHE}t)"  # n't
# Abbreviations that keep their period (PTB and the Moses tokenizer do so through a list of such prefixes).
_ABBREVIATIONS = (
    "Mr", "Mrs", "Ms", "Dr", "Prof", "Sr", "Jr", "St", "Mt", "Gen", "Gov", "Sen", "Rep", "Rev", "vs", "etc",
    "Inc", "Ltd", "Co", "Corp", "Jan", "Feb", "Mar", "Apr", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec",
)  # fmt: skip


def _word_body(apostrophe_suffixes: str) -> str:
    """Word characters joined by `-`, `.`, digit-only `,` `:` `/`, or an apostrophe not starting a suffix."""
    joiner = (
        r"(?:-|\."
        r"|(?<=\p{N})[,:/](?=\p{N})"
        rf"|{_APOSTROPHE}(?!{apostrophe_suffixes}{_NOT_FOLLOWED_BY_WORD_CHARACTER}))"
    )
    return rf"{_WORD_CHARACTER}+(?:{joiner}(?={_WORD_CHARACTER}){_WORD_CHARACTER}+)*"


def _treebank_word_pattern(contraction_style: str) -> str:
    """
    The regular expression of the "ptb" (`contraction_style="ptb"`) and "moses" splitters: each match is a word.

    It runs inside whitespace-separated chunks (a `WhitespaceSplit` runs first), leftmost match first; the
    alternatives are tried in this order:

    1. initialisms `U.S.`, `e.g.`, `a.m.` (single letters each followed by a period) stay one word;
    2. a short list of abbreviations keeps its period (`Mr.`, `Dr.`, `vs.`, `etc.`, `Inc.`, `Jan.`, ...);
    3. contractions: "ptb" splits `don't -> do n't`, `can't -> ca n't`, "moses" splits `don't -> don 't`; both split
       the clitics `'s 'm 'd 'll 're 've` (`it's -> it 's`, case-insensitive, ASCII or U+2019 apostrophe);
    4. a word: letters, marks and digits, joined by `-` (`state-of-the-art`), `.` between word characters
       (`3.5`, `www.example.com`), `,` `:` `/` between digits (`1,000`, `12:30`, `1/2`) and other apostrophes
       (`O'Neill`, `rock'n'roll`);
    5. `...` and `--` runs;
    6. any other single grapheme cluster: punctuation, symbols, and emoji sequences (`👩‍💻`, `🇺🇸`, `👍🏽` stay whole).

    It does not: convert quotes or brackets (no PTB ```` `` ```` / `''` / `-LRB-`), split `cannot`/`gonna`, tell a
    sentence-final abbreviation from a period (`in the U.S.` keeps one `U.S.`, no extra `.`), know abbreviations
    outside its list (`approx.` -> `approx .`), split a missing space after a period (`end.Start` is one word), or
    keep URLs and e-mail addresses with `/`, `@`, `:` together.
    """
    initialism = r"(?:\p{L}\.){2,}"
    abbreviation = rf"(?:{'|'.join(_ABBREVIATIONS)})\.(?!\p{{L}})"
    alternatives = [initialism, abbreviation]
    if contraction_style == "ptb":
        alternatives += [
            _word_body(rf"(?:{_CLITIC}|t)") + rf"(?={_NOT_SUFFIX}{_NOT_FOLLOWED_BY_WORD_CHARACTER})",  # do|n't
            _NOT_SUFFIX + _NOT_FOLLOWED_BY_WORD_CHARACTER,  # n't
            _APOSTROPHE + _CLITIC + _NOT_FOLLOWED_BY_WORD_CHARACTER,  # 's 'm 'd 'll 're 've
            _word_body(rf"(?:{_CLITIC}|t)"),
        ]
    elif contraction_style == "moses":
        suffix = rf"(?:{_CLITIC}|(?i:t))"
        alternatives += [
            _APOSTROPHE + suffix + _NOT_FOLLOWED_BY_WORD_CHARACTER,  # 't 's 'm 'd 'll 're 've
            _word_body(suffix),
        ]
    else:
        raise ValueError(f"contraction_style must be 'ptb' or 'moses', got {contraction_style!r}")
    alternatives += [r"\.{2,}|-{2,}", r"\X"]
    return "|".join(alternatives)


PTB_WORD_PATTERN = _treebank_word_pattern("ptb")
MOSES_WORD_PATTERN = _treebank_word_pattern("moses")
DEFAULT_WORD_SPLITTER = "moses"  # the tokenisation of the released models' training data (approximated)

# Korean morphological analysers behind the "kiwi" and "mecab" splitters (optional): splitter name -> (module
# imported, pip package, elmo-hf extra). The module is imported when a tokenizer is built with the splitter, never
# when this file is imported.
MORPHEME_ANALYSERS = {
    "kiwi": ("kiwipiepy", "kiwipiepy", "kiwi"),
    "mecab": ("mecab", "python-mecab-ko", "mecab"),
}
_NON_SPACE_RUN = re.compile(r"\S+")


def _import_analyser_module(name: str) -> Any:
    """The module of the "kiwi" or "mecab" analyser; an `ImportError` naming the extra to install when it is missing."""
    module_name, package, extra = MORPHEME_ANALYSERS[name]
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise ImportError(
            f"word_splitter={name!r} needs the {package} package, which cannot be imported ({error}): "
            f"pip install 'elmo-hf[{extra}]' (or pip install {package})"
        ) from None


@functools.lru_cache(maxsize=None)
def _morpheme_analyser(name: str) -> Any:
    """The analyser of the "kiwi" or "mecab" splitter: created on first use, then shared by every tokenizer of the
    process (Kiwi loads its model for about 2 s and warms up for 2 s more on its first sentence)."""
    module = _import_analyser_module(name)
    return module.Kiwi() if name == "kiwi" else module.MeCab()


def _morpheme_spans(name: str, text: str) -> list[tuple[int, int]]:
    """`(start, end)` character offsets of the morphemes of `text`, as the analyser `name` finds them."""
    analyser = _morpheme_analyser(name)
    if name == "kiwi":
        # A Kiwi token's `form` is the morpheme's dictionary form (했 -> 하 + 었, both pointing at 했); its span
        # points at the surface. Inserted morphemes (the copula 이 after a vowel) have an empty span.
        return [(token.start, token.start + token.len) for token in analyser.tokenize(text)]
    # python-mecab-ko's own spans are shifted after leading whitespace: find each surface, in order, instead.
    spans, position = [], 0
    for morpheme in analyser.parse(text):
        start = text.find(morpheme.surface, position)
        if start < 0:
            raise ValueError(f"mecab returned the morpheme {morpheme.surface!r}, which is not in the text {text[:60]!r}")
        position = start + len(morpheme.surface)
        spans.append((start, position))
    return spans


def surface_words(text: str, spans: Iterable[tuple[int, int]]) -> list[tuple[str, tuple[int, int]]]:
    """
    The words of `text` given its morphemes' character spans: each word is the surface of one morpheme (`은행에` ->
    `은행`, `에`), morphemes whose spans overlap are one word (a contracted syllable such as 갔 = 가 + 았 cannot be
    cut), and words never hold whitespace. Characters no morpheme covers are not lost: they form words of their own
    (split at whitespace). So the non-space characters of the words, in order, are those of `text`.

    Returns `[(word, (start, end)), ...]` with `text[start:end] == word`.
    """
    covered: list[list[int]] = []  # merged [start, end) runs, in text order
    for start, end in sorted(spans):
        if end <= start:
            continue
        if covered and start < covered[-1][1]:
            covered[-1][1] = max(covered[-1][1], end)
        else:
            covered.append([start, end])
    pieces, position = [], 0
    for start, end in covered:
        pieces += [(position, start), (start, end)]  # an uncovered gap, then the morpheme
        position = end
    pieces.append((position, len(text)))
    return [
        (match.group(), match.span())
        for start, end in pieces
        if end > start
        for match in _NON_SPACE_RUN.finditer(text, start, end)
    ]


class MorphemeWordSplitter:
    """
    The "kiwi" (kiwipiepy) and "mecab" (python-mecab-ko) word splitters: Korean text split into morphemes, so that
    particles and endings are words of their own (`은행에` -> `은행`, `에`), as Korean ELMo models are trained
    (ratsgo's Korean embeddings book: Mecab morphemes). A word is a morpheme's SURFACE, the characters of the text it
    covers (see `surface_words`); Kiwi's dictionary forms (했 -> 하, 었) are not used, so every word is a piece of the
    text and offsets point into it.

    `pre_tokenize_str(text)` returns `[(word, (start, end)), ...]` like a `tokenizers` pre-tokenizer. The analyser
    is imported here (an `ImportError` naming the extra when it is missing) and created on first use, once per
    process; the splitter holds only its name, so it pickles (datasets fingerprints tokenizers). The analysis is
    deterministic for a given version of the analyser and its dictionary; another version may split some words
    differently (docs/guide/korean.md).
    """

    def __init__(self, name: str):
        check_choice("word_splitter", name, tuple(MORPHEME_ANALYSERS))
        _import_analyser_module(name)
        self.name = name

    def pre_tokenize_str(self, text: str) -> list[tuple[str, tuple[int, int]]]:
        return surface_words(text, _morpheme_spans(self.name, text))

    def __repr__(self) -> str:
        return f"MorphemeWordSplitter({self.name!r})"


def build_word_splitter(name: str) -> pre_tokenizers.PreTokenizer | MorphemeWordSplitter:
    """
    The word splitter called `name` (one of `WORD_SPLITTERS`): a `tokenizers` pre-tokenizer, or for "kiwi" and
    "mecab" a `MorphemeWordSplitter` (`ImportError` naming the extra to install when its analyser is missing).

    Its `pre_tokenize_str(text)` returns `[(word, (start, end)), ...]` with character offsets into `text`.
    """
    if isinstance(name, str) and name in MORPHEME_ANALYSERS:
        return MorphemeWordSplitter(name)
    if name == "whitespace":
        return pre_tokenizers.WhitespaceSplit()
    if name == "bert":
        return pre_tokenizers.BertPreTokenizer()
    if name in ("ptb", "moses"):
        pattern = PTB_WORD_PATTERN if name == "ptb" else MOSES_WORD_PATTERN
        return pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(pattern), behavior="isolated")]
        )
    check_choice("word_splitter", name, WORD_SPLITTERS)
    raise AssertionError(f"no splitter built for {name!r}")  # unreachable: every name of WORD_SPLITTERS is built above


__all__ = [
    "DEFAULT_WORD_SPLITTER",
    "MORPHEME_ANALYSERS",
    "MOSES_WORD_PATTERN",
    "MorphemeWordSplitter",
    "PTB_WORD_PATTERN",
    "WORD_SPLITTERS",
    "build_word_splitter",
    "surface_words",
]
