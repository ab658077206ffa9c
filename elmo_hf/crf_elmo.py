"""A linear-chain conditional random field: the output layer of the paper's NER tagger (biLSTM-CRF).

Scores of a tag path y over the words of a sentence with per-word emission scores E (words, tags):

    score(y) = start[y_0] + sum_i E[i, y_i] + sum_i transitions[y_{i-1}, y_i] + end[y_last]

The loss is the negative log-likelihood -log p(gold) = log Z - log Z_gold, where log Z sums exp(score) over every
path (the forward algorithm) and log Z_gold over the paths that agree with the gold tags where they are known: a
word labelled -100 (the transformers ignore index) is left open, so a partly labelled sentence is still a proper
likelihood, and padding words (mask 0) are not part of the sentence at all. Decoding is Viterbi.

Transition constraints (`allowed_transitions`) forbid what a tagging scheme cannot produce (`O` -> `I-PER` in BIO;
`B-PER` -> `O` in BIOUL): a forbidden start, transition or end adds `FORBIDDEN` to a path's score, so no decoded path
takes one and the likelihood gives such paths no weight.

Why a module of its own, not a library: `pytorch-crf` (last release 2019) has no constraints and needs every
sequence's first word unmasked with no way to leave a labelled word open; `torch-struct` is a general toolkit,
unmaintained since 2021; AllenNLP's CRF lives in an archived package pinned to old torch. This file must also travel
with a checkpoint as remote code, which a dependency could not. Equal to brute-force enumeration in
`tests/test_crf_elmo.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from .choices_elmo import TAGGING_SCHEMES

IGNORE_INDEX = -100
FORBIDDEN = -10000.0  # added to a forbidden start, transition or end: exp(-10000) is 0 in float32 and float64


def _split_label(label: str) -> tuple[str, str]:
    """`"B-PER"` -> `("B", "PER")`; `"O"` -> `("O", "")`. A label without a scheme prefix is refused by the caller."""
    prefix, _, entity = label.partition("-")
    return prefix, entity


def _may_follow(scheme: str, previous: tuple[str, str] | None, current: tuple[str, str] | None) -> bool:
    """Whether `current` may follow `previous` in `scheme`; None is the sentence's start (as previous) or end."""
    first, second = previous, current
    if scheme == "BIO":
        if second is None or second[0] in ("B", "O"):
            return True
        return first is not None and first[0] in ("B", "I") and first[1] == second[1]
    # BIOUL: an entity is U, or B I* L, of one type.
    inside_before = first is not None and first[0] in ("B", "I")
    if second is None or second[0] in ("B", "U", "O"):
        return not inside_before
    return inside_before and first[1] == second[1]


def allowed_transitions(id2label: Mapping[int, str], scheme: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """
    The transitions `scheme` ("BIO" or "BIOUL") allows between the labels `id2label` names.

    Returns:
        `(start (tags,), transitions (tags, tags), end (tags,))` bool tensors: `transitions[i, j]` is whether tag j
        may follow tag i; `start` which tags may begin a sentence, `end` which may end one.
    """
    if scheme not in TAGGING_SCHEMES:
        raise ValueError(f"CRF constraints: the tagging scheme must be one of {TAGGING_SCHEMES}, got {scheme!r}")
    tags = [id2label[index] for index in range(len(id2label))]
    prefixes = {"BIO": ("B", "I", "O"), "BIOUL": ("B", "I", "O", "U", "L")}[scheme]
    parts = []
    for tag in tags:
        prefix, entity = _split_label(str(tag))
        if prefix not in prefixes or (prefix == "O") != (entity == ""):
            raise ValueError(
                f"CRF constraints: label {tag!r} is not a {scheme} tag (expected 'O' or one of "
                f"{', '.join(p + '-TYPE' for p in prefixes if p != 'O')})"
            )
        parts.append((prefix, entity))
    start = torch.tensor([_may_follow(scheme, None, part) for part in parts])
    end = torch.tensor([_may_follow(scheme, part, None) for part in parts])
    transitions = torch.tensor([[_may_follow(scheme, before, after) for after in parts] for before in parts])
    return start, transitions, end


class ConditionalRandomField(nn.Module):
    """
    Linear-chain CRF over `num_tags` tags (see the module docstring), with optional constraints.

    Args:
        num_tags: the number of tags.
        constraints: `(start, transitions, end)` bool masks of what is allowed (`allowed_transitions`), or None.
    """

    def __init__(self, num_tags: int, constraints: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None):
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))
        self.start_transitions = nn.Parameter(torch.zeros(num_tags))
        self.end_transitions = nn.Parameter(torch.zeros(num_tags))
        if constraints is None:
            constraints = (torch.ones(num_tags, dtype=torch.bool), torch.ones(num_tags, num_tags, dtype=torch.bool),
                           torch.ones(num_tags, dtype=torch.bool))
        start, transitions, end = constraints
        if tuple(transitions.shape) != (num_tags, num_tags) or start.shape != (num_tags,) or end.shape != (num_tags,):
            raise ValueError(f"CRF constraints must be masks of {num_tags} tags, got shapes {start.shape}, {transitions.shape}, {end.shape}")
        # Derived from the config's labels at every load, so not saved with the weights.
        self.register_buffer("allowed_start", start.clone(), persistent=False)
        self.register_buffer("allowed_transitions", transitions.clone(), persistent=False)
        self.register_buffer("allowed_end", end.clone(), persistent=False)

    def _scores(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(start (tags,), transitions (tags, tags), end (tags,)) with `FORBIDDEN` added where not allowed."""
        penalty = lambda allowed: (~allowed).to(self.transitions.dtype) * FORBIDDEN  # noqa: E731
        return (
            self.start_transitions + penalty(self.allowed_start),
            self.transitions + penalty(self.allowed_transitions),
            self.end_transitions + penalty(self.allowed_end),
        )

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """
        log Z of each sentence by the forward algorithm.

        Args:
            emissions: `(batch, words, tags)` scores.
            mask: `(batch, words)`, 1 for the sentence's words, 0 for padding (a sentence's words come first).

        Returns:
            `(batch,)`; 0 for a sentence without words.
        """
        start, transitions, end = self._scores()
        mask = mask.bool()
        if emissions.shape[1] == 0:
            return emissions.new_zeros(emissions.shape[0])
        alpha = start + emissions[:, 0]  # (batch, tags): paths ending in each tag at word 0
        for index in range(1, emissions.shape[1]):
            # (batch, previous, 1) + (previous, current) -> logsumexp over previous -> (batch, current)
            step = torch.logsumexp(alpha.unsqueeze(2) + transitions, dim=1) + emissions[:, index]
            alpha = torch.where(mask[:, index : index + 1], step, alpha)  # padding carries the last word's alpha
        log_z = torch.logsumexp(alpha + end, dim=1)
        return torch.where(mask[:, 0], log_z, torch.zeros_like(log_z))

    def negative_log_likelihood(self, emissions: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """
        -log p(labels) of each sentence: log Z - log Z_gold, where words labelled -100 are left open.

        Args:
            emissions: `(batch, words, tags)`; labels: `(batch, words)` tag ids or -100; mask: `(batch, words)`.

        Returns:
            `(batch,)`.
        """
        known = (labels != IGNORE_INDEX) & mask.bool()
        if torch.any(known & ((labels < 0) | (labels >= self.num_tags))):
            raise ValueError(f"CRF labels must be tag ids in [0, {self.num_tags}) or {IGNORE_INDEX}, got {labels.unique().tolist()}")
        gold_tag = torch.nn.functional.one_hot(labels.clamp(min=0), self.num_tags).bool()  # (batch, words, tags)
        agrees = gold_tag | ~known.unsqueeze(-1)
        # -inf, not FORBIDDEN: gold tags that break the constraints would otherwise weigh less than other tags.
        gold_emissions = emissions.masked_fill(~agrees, float("-inf"))
        return self.log_partition(emissions, mask) - self.log_partition(gold_emissions, mask)

    def viterbi_decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """
        The best path of each sentence.

        Args:
            emissions: `(batch, words, tags)`; mask: `(batch, words)`, the sentence's words first.

        Returns:
            One list of tag ids per sentence, as long as its words.
        """
        start, transitions, end = self._scores()
        lengths = mask.bool().sum(dim=1).tolist()
        if emissions.shape[1] == 0:
            return [[] for _ in lengths]
        best = start + emissions[:, 0]  # (batch, tags)
        pointers = []
        for index in range(1, emissions.shape[1]):
            candidates = best.unsqueeze(2) + transitions  # (batch, previous, current)
            step_best, step_pointer = candidates.max(dim=1)
            pointers.append(step_pointer)
            best = torch.where(mask.bool()[:, index : index + 1], step_best + emissions[:, index], best)
        paths = []
        for row, length in enumerate(lengths):
            paths.append(self._backtrack(best[row] + end, pointers, row, length))
        return paths

    def max_marginals(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """
        The score of the best path through each tag at each word: `(batch, words, tags)`, 0 at padding. Its argmax at
        every word is the Viterbi path (when the best path is unique), and its max over tags at any word is the best
        path's score, so a consumer that takes a per-word argmax (Trainer's predictions, the token-classification
        pipeline) reads the Viterbi path from it.
        """
        start, transitions, end = self._scores()
        mask = mask.bool()
        batch, words, tags = emissions.shape
        if words == 0:
            return emissions.new_zeros(batch, 0, tags)
        forward = [start + emissions[:, 0]]  # best score of a path over words 0..i ending in each tag (with E[i])
        for index in range(1, words):
            step = (forward[-1].unsqueeze(2) + transitions).amax(dim=1) + emissions[:, index]
            forward.append(torch.where(mask[:, index : index + 1], step, forward[-1]))
        last_word = mask.sum(dim=1, keepdim=True) - 1  # (batch, 1)
        final = end.expand(batch, tags)
        backward = [final] * words  # best score of the path after word i given its tag: transitions, emissions, end
        for index in range(words - 2, -1, -1):
            following = emissions[:, index + 1] + backward[index + 1]  # (batch, next tag)
            step = (transitions + following.unsqueeze(1)).amax(dim=2)  # (batch, tag)
            backward[index] = torch.where(last_word == index, final, step)
        scores = torch.stack(forward, dim=1) + torch.stack(backward, dim=1)
        return scores * mask.unsqueeze(-1)

    @staticmethod
    def _backtrack(final: torch.Tensor, pointers: Sequence[torch.Tensor], row: int, length: int) -> list[int]:
        if length == 0:
            return []
        tag = int(final.argmax())
        path = [tag]
        for pointer in reversed(pointers[: length - 1]):
            tag = int(pointer[row, tag])
            path.append(tag)
        return path[::-1]


__all__ = ["ConditionalRandomField", "FORBIDDEN", "TAGGING_SCHEMES", "allowed_transitions"]
