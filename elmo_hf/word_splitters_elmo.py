"""Splitting raw text into words, by a splitter chosen by name (`word_splitter`; `build_word_splitter`):

- `"moses"` (default): a regular expression approximating the Moses tokenisation of ELMo's training data, the
  1 Billion Word Benchmark: punctuation split off, contractions split as `don't -> don 't`, `it's -> it 's`. It
  reproduces the tokenisation of all 30 sentences of AllenNLP's fixture (taken from that data).
- `"ptb"`: the same, but contractions split the Penn-Treebank way (`don't -> do n't`); see `PTB_WORD_PATTERN` for
  what both patterns do and do not do.
- `"whitespace"`: split on whitespace only, for text that is already tokenised.
- `"space"`: split on the space character U+0020 alone, empty pieces dropped: what a TF-Hub ELMo module's `default`
  signature does (`tf.string_split(sentences, " ")`); tabs, newlines and other whitespace stay inside words.
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
from typing import Any, NamedTuple

from tokenizers import Regex, pre_tokenizers

from .choices_elmo import WORD_SPLITTERS
from .validation_elmo import check_choice

# ----------------------------------------------------------------------------------------------------------------
# Word splitters
# ----------------------------------------------------------------------------------------------------------------
class CharacterClasses(NamedTuple):
    """The character classes the treebank patterns are written in, as one regular-expression dialect spells them."""

    letter: str
    digit: str
    word: str  # a word character: a letter, a combining mark or a digit
    grapheme: str  # one user-perceived character (a grapheme cluster)


# Oniguruma's, which `tokenizers.Regex` compiles: the definition.
UNICODE_CLASSES = CharacterClasses(letter=r"\p{L}", digit=r"\p{N}", word=r"[\p{L}\p{M}\p{N}]", grapheme=r"\X")
# The same classes within ASCII, for Python's `re` with `re.ASCII` (which has no `\p{..}` or `\X`): ASCII holds no
# combining marks, and every ASCII character but whitespace is a grapheme cluster of its own (CR LF, the one cluster
# of two, is whitespace). `re.ASCII`'s `\s` is Rust's `char::is_whitespace` within ASCII (TAB to CR and space; not
# U+001C-U+001F, which Python's `str.split` takes as whitespace).
ASCII_CLASSES = CharacterClasses(letter="[A-Za-z]", digit="[0-9]", word="[A-Za-z0-9]", grapheme=r"\S")
_APOSTROPHE = r"['’]"  # ASCII apostrophe and U+2019 RIGHT SINGLE QUOTATION MARK
_CLITIC = r"(?i:s|m|d|ll|re|ve)"  # 's 'm 'd 'll 're 've
_NOT_SUFFIX = rf"(?i:n{_APOSTROPHE}t)"  # n't
# Abbreviations that keep their period (PTB and the Moses tokenizer do so through a list of such prefixes).
_ABBREVIATIONS = (
    "Mr", "Mrs", "Ms", "Dr", "Prof", "Sr", "Jr", "St", "Mt", "Gen", "Gov", "Sen", "Rep", "Rev", "vs", "etc",
    "Inc", "Ltd", "Co", "Corp", "Jan", "Feb", "Mar", "Apr", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec",
)  # fmt: skip


def _not_followed_by_word_character(classes: CharacterClasses) -> str:
    return rf"(?!{classes.word})"


def _word_body(apostrophe_suffixes: str, classes: CharacterClasses) -> str:
    """Word characters joined by `-`, `.`, digit-only `,` `:` `/`, or an apostrophe not starting a suffix."""
    word = classes.word
    joiner = (
        r"(?:-|\."
        rf"|(?<={classes.digit})[,:/](?={classes.digit})"
        rf"|{_APOSTROPHE}(?!{apostrophe_suffixes}{_not_followed_by_word_character(classes)}))"
    )
    return rf"{word}+(?:{joiner}(?={word}){word}+)*"


def _treebank_word_pattern(contraction_style: str, classes: CharacterClasses = UNICODE_CLASSES) -> str:
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

    `classes` spells the character classes: `UNICODE_CLASSES` (the definition, for `tokenizers.Regex`), or
    `ASCII_CLASSES` for the same split of ASCII text by Python's `re` (`ascii_word_pattern`).
    """
    initialism = rf"(?:{classes.letter}\.){{2,}}"
    abbreviation = rf"(?:{'|'.join(_ABBREVIATIONS)})\.(?!{classes.letter})"
    not_followed_by_word_character = _not_followed_by_word_character(classes)
    alternatives = [initialism, abbreviation]
    if contraction_style == "ptb":
        alternatives += [
            _word_body(rf"(?:{_CLITIC}|t)", classes) + rf"(?={_NOT_SUFFIX}{not_followed_by_word_character})",  # do|n't
            _NOT_SUFFIX + not_followed_by_word_character,  # n't
            _APOSTROPHE + _CLITIC + not_followed_by_word_character,  # 's 'm 'd 'll 're 've
            _word_body(rf"(?:{_CLITIC}|t)", classes),
        ]
    elif contraction_style == "moses":
        suffix = rf"(?:{_CLITIC}|(?i:t))"
        alternatives += [
            _APOSTROPHE + suffix + not_followed_by_word_character,  # 't 's 'm 'd 'll 're 've
            _word_body(suffix, classes),
        ]
    else:
        raise ValueError(f"contraction_style must be 'ptb' or 'moses', got {contraction_style!r}")
    alternatives += [r"\.{2,}|-{2,}", classes.grapheme]
    return "|".join(alternatives)


PTB_WORD_PATTERN = _treebank_word_pattern("ptb")
MOSES_WORD_PATTERN = _treebank_word_pattern("moses")
DEFAULT_WORD_SPLITTER = "moses"  # the tokenisation of the released models' training data (approximated)

# What the "whitespace", "ptb" and "moses" splitters do to ASCII text, in Python's `re` (`ascii_word_pattern`).
_ASCII_WORD_PATTERNS = {
    "whitespace": r"\S+",
    "space": r"[^ ]+",
    "ptb": _treebank_word_pattern("ptb", ASCII_CLASSES),
    "moses": _treebank_word_pattern("moses", ASCII_CLASSES),
}


def ascii_word_pattern(name: str) -> re.Pattern | None:
    """
    For the splitters whose split of ASCII text Python's `re` reproduces ("whitespace", "space", "ptb", "moses"), a compiled
    pattern whose `findall(text)` gives the words of an ASCII `text` (`text.isascii()`): the same words as the
    splitter's `pre_tokenize_str`, without offsets and without a round trip to Rust per text (on 20,000 lines of
    tinyshakespeare and UD English-EWT: "moses" 7.6x, "ptb" 5.4x, "whitespace" 12x faster; tested equal on random ASCII
    text). None for the other splitters.

    One match per word, whitespace skipped: the treebank patterns need no whitespace pass first, because no
    alternative matches whitespace and each look-around sees only characters of the same chunk or the whitespace
    after it, which is no word character, like the chunk's end.
    """
    pattern = _ASCII_WORD_PATTERNS.get(name) if isinstance(name, str) else None
    return None if pattern is None else re.compile(pattern, re.ASCII)


def words_of_text(text: str, splitter: Any, pattern: re.Pattern | None) -> list[str]:
    """The words `splitter` (`build_word_splitter`) finds in `text`, without offsets: by its `ascii_word_pattern`
    (`pattern`) when `text` is ASCII and the splitter has one, else by the splitter itself."""
    if pattern is not None and text.isascii():
        return pattern.findall(text)
    return [word for word, _ in splitter.pre_tokenize_str(text)]


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
    if name == "space":
        return pre_tokenizers.Split(" ", behavior="removed")  # tokenizers drops the empty pieces between spaces
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
    "ascii_word_pattern",
    "build_word_splitter",
    "surface_words",
    "words_of_text",
]
