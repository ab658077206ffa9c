"""What each layer of a biLM holds: a linear probe per layer, and one over the paper's learned scalar mix.

The paper's section 5.3 asks which layer a task reads: a linear classifier on each biLM layer's vectors, trained on a
token-labelled corpus and scored on another, shows where the information lies (part of speech: the first biLSTM
layer; word sense: the top one). ``probe_layers`` does that for every representation of a model (layer 0 the token
layer, layer l the biLSTM's layer l) and for the mix ``gamma * sum_j softmax(w)_j h_j`` (`ELMoScalarMix`, the model's
own) learned jointly with its classifier, whose softmax(w) says which layers a probe of the task prefers.

The biLM is frozen and run once per sentence (in inference mode, its vectors kept in memory: words x (L + 1) x 2P
float32); the probes are logistic regressions trained with Adam on shuffled mini-batches drawn from a seeded
generator, so a run is repeatable with the same ``seed``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from ..modeling_elmo import ELMoModel, ELMoScalarMix
from ..tokenization_elmo import ELMoTokenizer
from ..validation_elmo import ELMoHFError, check_int, check_number


class ProbeInputError(ELMoHFError):
    """A probing corpus the probes cannot use (no words, tags and words of different lengths, one tag only)."""


@dataclass
class TaggedSentences:
    """Sentences as words with one tag per word: ``words[i][j]`` is tagged ``tags[i][j]``."""

    words: list[list[str]]
    tags: list[list[str]]
    name: str = "corpus"

    def check(self) -> None:
        if len(self.words) != len(self.tags):
            raise ProbeInputError(f"{self.name}: {len(self.words)} sentences of words but {len(self.tags)} of tags")
        for index, (words, tags) in enumerate(zip(self.words, self.tags)):
            if len(words) != len(tags):
                raise ProbeInputError(f"{self.name}: sentence {index + 1} has {len(words)} words and {len(tags)} tags")
        if not any(self.words):
            raise ProbeInputError(f"{self.name}: no tagged words")

    @property
    def flat_tags(self) -> list[str]:
        return [tag for tags in self.tags for tag in tags]


@dataclass
class ProbeOptions:
    """How the probes are trained: Adam at ``learning_rate`` for ``epochs`` passes over mini-batches of
    ``batch_size`` words; the biLM reads ``sentence_batch_size`` sentences at a time."""

    seed: int = 0
    epochs: int = 10
    batch_size: int = 256
    learning_rate: float = 3e-3
    sentence_batch_size: int = 32

    def check(self) -> None:
        check_int("seed", self.seed, 0)
        check_int("epochs", self.epochs, 1)
        check_int("batch_size", self.batch_size, 1)
        check_int("sentence_batch_size", self.sentence_batch_size, 1)
        check_number("learning_rate", self.learning_rate, 0.0, minimum_inclusive=False)


@dataclass
class ProbeReport:
    """Test accuracy of each layer's probe and of the mix's, the mix's learned weights, and two baselines: the most
    frequent tag, and each word's most frequent training tag (words unseen in training: the most frequent tag)."""

    layers: list[dict[str, float | str]]
    mix: dict[str, object]
    baselines: dict[str, float]
    tags: list[str]
    train_words: int
    test_words: int
    options: dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def table(self) -> str:
        rows = [("representation", "accuracy")]
        rows += [(str(layer["name"]), f"{100 * float(layer['accuracy']):.2f}%") for layer in self.layers]
        weights = ", ".join(f"{weight:.3f}" for weight in self.mix["layer_weights"])
        rows.append((f"scalar mix (softmax(w) = {weights}; gamma = {self.mix['gamma']:.3f})", f"{100 * self.mix['accuracy']:.2f}%"))
        rows += [(f"baseline: {name.replace('_', ' ')}", f"{100 * value:.2f}%") for name, value in self.baselines.items()]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value:>9}" for name, value in rows]
        lines.insert(1, "-" * len(lines[0]))
        return "\n".join(lines)


def layer_names(num_layers: int) -> list[str]:
    return ["layer 0 (token)"] + [f"layer {index} (biLSTM {index})" for index in range(1, num_layers)]


def layer_features(
    model: ELMoModel, tokenizer: ELMoTokenizer, words: Sequence[Sequence[str]], sentence_batch_size: int,
    progress: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Every word's vector in each of the L + 1 representations: (words in all sentences, L + 1, 2P) float32, in
    reading order. Sentences without words add nothing."""
    chunks = []
    for start in range(0, len(words), sentence_batch_size):
        batch = [list(sentence) for sentence in words[start : start + sentence_batch_size] if sentence]
        if batch:
            encoding = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
            with torch.inference_mode():
                output = model(**encoding.to(model.device))
            layers = torch.stack(output.hidden_states, dim=2)  # (B, T, L + 1, 2P)
            chunks.append(layers[encoding["attention_mask"].bool()].float().cpu())
        if progress is not None:
            progress(min(sentence_batch_size, len(words) - start))
    return torch.cat(chunks) if chunks else torch.zeros(0)


class MixProbe(nn.Module):
    """``ELMoScalarMix`` over the L + 1 layers, then a linear classifier: (N, L + 1, 2P) -> (N, tags)."""

    def __init__(self, num_layers: int, dim: int, num_tags: int):
        super().__init__()
        self.mix = ELMoScalarMix(num_layers)
        self.classifier = nn.Linear(dim, num_tags)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.mix(list(features.unbind(dim=1))))


def train_probe(probe: nn.Module, features: torch.Tensor, labels: torch.Tensor, options: ProbeOptions) -> nn.Module:
    """Fit ``probe`` to ``labels`` (N,) from ``features`` (N, ...) by cross-entropy; seeded, so repeatable."""
    generator = torch.Generator().manual_seed(options.seed)
    optimizer = torch.optim.Adam(probe.parameters(), lr=options.learning_rate)
    probe.train()
    for _ in range(options.epochs):
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(order), options.batch_size):
            chosen = order[start : start + options.batch_size]
            optimizer.zero_grad()
            nn.functional.cross_entropy(probe(features[chosen]), labels[chosen]).backward()
            optimizer.step()
    return probe.eval()


def accuracy(probe: nn.Module, features: torch.Tensor, labels: torch.Tensor, batch_size: int = 4096) -> float:
    """The share of ``labels`` the probe predicts; a label the training data lacked (-1) is always an error."""
    with torch.no_grad():
        predicted = torch.cat([probe(features[start : start + batch_size]).argmax(-1) for start in range(0, len(labels), batch_size)])
    return float((predicted == labels).double().mean())


def baselines(train: TaggedSentences, test: TaggedSentences) -> dict[str, float]:
    """The most frequent training tag, and each word's most frequent training tag, scored on ``test``."""
    majority = Counter(train.flat_tags).most_common(1)[0][0]
    by_word: dict[str, Counter] = {}
    for words, tags in zip(train.words, train.tags):
        for word, tag in zip(words, tags):
            by_word.setdefault(word, Counter())[tag] += 1
    pairs = [(word, tag) for words, tags in zip(test.words, test.tags) for word, tag in zip(words, tags)]
    word_tag = {word: counts.most_common(1)[0][0] for word, counts in by_word.items()}
    return {
        "most_frequent_tag": sum(tag == majority for _, tag in pairs) / len(pairs),
        "most_frequent_tag_per_word": sum(word_tag.get(word, majority) == tag for word, tag in pairs) / len(pairs),
    }


def probe_layers(
    model: ELMoModel, tokenizer: ELMoTokenizer, train: TaggedSentences, test: TaggedSentences,
    options: ProbeOptions | None = None, progress: Callable[[str, int], None] | None = None,
) -> ProbeReport:
    """
    Train a linear probe per representation of ``model`` and one over a learned scalar mix on ``train``, and score
    them on ``test`` (see the module docstring). ``progress(stage, amount)`` is called as sentences are read
    (stage "read", amount in sentences) and as each probe is trained (stage "probe", amount 1).
    """
    options = options or ProbeOptions()
    options.check()
    train.check()
    test.check()
    tags = sorted(set(train.flat_tags))
    if len(tags) < 2:
        raise ProbeInputError(f"{train.name}: one tag only ({tags[0]!r}): nothing to tell apart")
    index = {tag: position for position, tag in enumerate(tags)}
    train_labels = torch.tensor([index[tag] for tag in train.flat_tags])
    test_labels = torch.tensor([index.get(tag, -1) for tag in test.flat_tags])
    read = (lambda sentences: progress("read", sentences)) if progress else None
    model.eval()
    train_features = layer_features(model, tokenizer, train.words, options.sentence_batch_size, read)
    test_features = layer_features(model, tokenizer, test.words, options.sentence_batch_size, read)
    num_layers, dim = train_features.shape[1:]
    layers = []
    for layer, name in enumerate(layer_names(num_layers)):
        torch.manual_seed(options.seed)
        probe = train_probe(nn.Linear(dim, len(tags)), train_features[:, layer], train_labels, options)
        layers.append({"name": name, "accuracy": accuracy(probe, test_features[:, layer], test_labels)})
        if progress:
            progress("probe", 1)
    torch.manual_seed(options.seed)
    mix_probe = train_probe(MixProbe(num_layers, dim, len(tags)), train_features, train_labels, options)
    mix = {
        "accuracy": accuracy(mix_probe, test_features, test_labels),
        "layer_weights": mix_probe.mix.layer_weights.detach().tolist(),
        "gamma": float(mix_probe.mix.gamma.detach()),
    }
    if progress:
        progress("probe", 1)
    return ProbeReport(
        layers, mix, baselines(train, test), tags, len(train_labels), len(test_labels), asdict(options)
    )


__all__ = [
    "MixProbe", "ProbeInputError", "ProbeOptions", "ProbeReport", "TaggedSentences", "accuracy", "baselines",
    "layer_features", "layer_names", "probe_layers", "train_probe",
]
