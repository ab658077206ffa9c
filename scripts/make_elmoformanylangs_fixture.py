"""Make the ELMoForManyLangs parity fixtures with the real package: tiny random-weight models saved in the package's own
directory format, and the package's `Embedder.sents2elmo` outputs on a few English and Korean sentences.

Run it in a throwaway environment that has the package (never in elmo-hf's own environment):

    python -m venv --system-site-packages /tmp/efml
    /tmp/efml/bin/pip install --no-deps elmoformanylangs==0.0.4.post2 overrides==3.1.0
    /tmp/efml/bin/python scripts/make_elmoformanylangs_fixture.py [--output tests/fixtures/elmoformanylangs]

(`overrides` 4 and later reject the package's `@overrides` annotations; 3.1.0 imports it. `--no-deps` keeps the
environment's torch.) It writes, for each variant in `VARIANTS`:

- `<variant>/`: a model directory as the package reads it (`config.json` naming the network configuration,
  that configuration, `char.dic`, `word.dic`, `token_embedder.pkl`, `encoder.pkl`; the pickles in torch's legacy
  format, as the released models are);
- `<variant>.npz`: `sentence<i>/layer<k>` = `sents2elmo(sentences, output_layer=k)[i]` for k in -1 (the average of
  the layers), 0 (token layer), 1, 2 (LSTM layers) and -2 (all layers stacked),

and `sentences.json` with the sentences. The package's encoder is stateful (each call starts from the states the
previous call ended with); the script resets it before every call, so each output is a cold start from zero states,
as elmo-hf computes by default. All sentences fit one batch (more batches would be shuffled at random and carry state
from one batch to the next).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from elmoformanylangs import Embedder
from elmoformanylangs.frontend import Model
from elmoformanylangs.modules.embedding_layer import EmbeddingLayer

PACKAGE_VERSION = "0.0.4.post2"
REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPOSITORY_ROOT / "tests" / "fixtures" / "elmoformanylangs"
NETWORK_CONFIG_NAME = "cnn_tiny.json"
OUTPUT_LAYERS = (-1, 0, 1, 2, -2)
WEIGHT_STD = 0.4  # large enough that gates, clipping and the skip connection all matter in the tiny model

# The package's markers, appended after the characters in this order by its training code (biLM.py).
SPECIAL_CHARACTERS = ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>")
SPECIAL_WORDS = ("<oov>", "<bos>", "<eos>", "<pad>")  # ids 0..3 in word.dic

# Characters seen "in training", in first-seen order as the package numbers them: ASCII, punctuation, Hangul, and
# U+3000 (IDEOGRAPHIC SPACE), whose char.dic line the package's reader strips to a bare id and maps back to U+3000.
CHARACTERS = (
    list("abcdefghijklmnopqrstuvwxyz")
    + list("THIWE")
    + list("0123456789")
    + list(".,!?'-")
    + list("나는서울에산다대한민국의수도특별시입니다학교가고싶어요오늘날씨좋")
    + ["\u3000"]
)
WORDS = (
    "the bank raised its rates . is long hello a b we sat on river"
    " 나는 서울에 산다 학교에 가고 싶어요 오늘 날씨가 좋다 입니다 대한민국의 수도"
).split()

# English and Korean; "internationalization" and the 12-syllable Korean word are longer than the 8-character limit
# (max_characters_per_token 10 minus <bow>/<eow>); "서울특별시입니" is 7 characters but 21 UTF-8 bytes (the limit counts
# characters); "X", "ÿ" and the emoji are not in char.dic (<oov>); "<eos>" typed as a word becomes the boundary word.
SENTENCES = [
    ["The", "bank", "raised", "its", "rates", "."],
    ["나는", "서울에", "산다", "."],
    ["internationalization", "is", "long"],
    ["대한민국의수도서울특별시", "서울특별시입니", "입니다"],
    ["Hello"],
    ["X", "ÿ", "😀", "가\u3000나", "abcdefgh"],
    ["a", "<eos>", "b", "오늘", "날씨가", "좋다", "!"],
]

VARIANTS = {
    # The released models' layout: a word embedding (word.dic) concatenated after the highway layers.
    "with-words": dict(
        encoder=dict(name="elmo", projection_dim=16, cell_clip=3, proj_clip=3, dim=32, n_layers=2),
        token_embedder=dict(
            name="cnn", activation="relu", filters=[[1, 4], [2, 8], [3, 8]], n_highway=2, word_dim=8, char_dim=6,
            max_characters_per_token=10,
        ),
    ),
    # Characters only (word_dim 0), tanh, one highway layer, tight clips that bite.
    "chars-only": dict(
        encoder=dict(name="elmo", projection_dim=16, cell_clip=0.5, proj_clip=0.3, dim=32, n_layers=2),
        token_embedder=dict(
            name="cnn", activation="tanh", filters=[[1, 4], [2, 6], [4, 8]], n_highway=1, word_dim=0, char_dim=6,
            max_characters_per_token=10,
        ),
    ),
}

# Training options as the package's `biLM.py train` dumps them into config.json (`vars(opt)`).
TRAINING_OPTIONS = dict(
    seed=1, gpu=-1, train_path="train.txt", valid_path=None, test_path=None, word_embedding=None, optimizer="adam",
    lr=0.001, lr_decay=0.8, batch_size=32, max_epoch=10, clip_grad=5, max_sent_len=20, min_count=3,
    max_vocab_size=150000, save_classify_layer=False, valid_size=0, eval_steps=None,
)


def lexicon(entries: list[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for entry in entries:
        ids.setdefault(entry, len(ids))
    return ids


def write_dic(path: Path, ids: dict[str, int]) -> None:
    """The package's `.dic` format: one `entry<TAB>id` line each (biLM.py `print('{0}\\t{1}'.format(...))`)."""
    with open(path, "w", encoding="utf-8") as file:
        for entry, index in ids.items():
            print(f"{entry}\t{index}", file=file)


def randomize(module: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, parameter in sorted(module.named_parameters()):
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * WEIGHT_STD)


def write_model(directory: Path, network: dict, seed: int) -> None:
    """A model directory in the package's layout, with random weights set on the package's own modules."""
    directory.mkdir(parents=True, exist_ok=True)
    config = dict(network, classifier=dict(name="sampled_softmax", n_samples=16), dropout=0.1)
    (directory / NETWORK_CONFIG_NAME).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    options = dict(TRAINING_OPTIONS, config_path=NETWORK_CONFIG_NAME, model=directory.name)
    (directory / "config.json").write_text(json.dumps(options) + "\n", encoding="utf-8")
    char_ids = lexicon(CHARACTERS + list(SPECIAL_CHARACTERS))
    word_ids = lexicon(list(SPECIAL_WORDS) + WORDS)
    write_dic(directory / "char.dic", char_ids)
    write_dic(directory / "word.dic", word_ids)  # the package's training writes it whether or not word_dim > 0

    embedder = network["token_embedder"]
    char_layer = EmbeddingLayer(embedder["char_dim"], char_ids, fix_emb=False)
    word_layer = EmbeddingLayer(embedder["word_dim"], word_ids, fix_emb=False) if embedder["word_dim"] > 0 else None
    model = Model(config, word_layer, char_layer, use_cuda=False)
    randomize(model, seed)
    # Legacy (pre-1.6) serialisation, like the released pickles.
    torch.save(model.token_embedder.state_dict(), directory / "token_embedder.pkl", _use_new_zipfile_serialization=False)
    torch.save(model.encoder.state_dict(), directory / "encoder.pkl", _use_new_zipfile_serialization=False)


def package_outputs(directory: Path) -> dict[str, np.ndarray]:
    """`sents2elmo` for every output layer, each call from zero states."""
    embedder = Embedder(str(directory), batch_size=64)
    outputs = {}
    for layer in OUTPUT_LAYERS:
        embedder.model.encoder.reset_states()  # the package's encoder would start from the previous call's states
        for index, vectors in enumerate(embedder.sents2elmo(SENTENCES, output_layer=layer)):
            outputs[f"sentence{index}/layer{layer}"] = np.asarray(vectors, dtype=np.float32)
    for index, sentence in enumerate(SENTENCES):
        stacked = outputs[f"sentence{index}/layer-2"]
        assert stacked.shape == (3, len(sentence), 32), stacked.shape
        for layer in (0, 1, 2):
            assert np.array_equal(stacked[layer], outputs[f"sentence{index}/layer{layer}"])
        assert np.allclose(stacked.mean(axis=0), outputs[f"sentence{index}/layer-1"], atol=1e-6)
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "sentences.json").write_text(json.dumps(SENTENCES, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for seed, (name, network) in enumerate(VARIANTS.items()):
        directory = args.output / name
        write_model(directory, network, seed)
        np.savez_compressed(args.output / f"{name}.npz", **package_outputs(directory))
        print(f"wrote {directory} and {name}.npz")


if __name__ == "__main__":
    main()
