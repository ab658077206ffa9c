"""Write tests/fixtures/tf-checkpoint/: tiny bilm-tf TensorFlow checkpoints made by bilm-tf's own code.

Run in a throwaway environment, never in elmo-hf's (TensorFlow is no dependency of elmo-hf; the tests read only the
committed outputs):

    python -m venv /tmp/tfenv
    /tmp/tfenv/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 h5py bilm==0.1.post5
    /tmp/tfenv/bin/python scripts/make_tf_checkpoint_fixture.py \\
        --corpus data/corpora/tinyshakespeare.txt --output tests/fixtures/tf-checkpoint

bilm 0.1.post5 (PyPI) is allenai/bilm-tf at its last commit; it is TensorFlow 1 code, run here through
``tf.compat.v1`` (installed as the ``tensorflow`` module before bilm is imported) with tf-keras for the v1 RNN cells.
For each model below the script:

1. trains it for a few batches with ``bilm.training.train`` (Adagrad, sampled softmax, the LSTM state carried between
   batches), which saves ``model.ckpt-N`` (TF's name-based ``Saver``), the ``checkpoint`` file and ``options.json``,
   exactly as ``bin/train_elmo.py`` does;
2. dumps the biLM with ``bilm.training.dump_weights`` (bilm-tf's ``bin/dump_weights.py``) to ``weights.hdf5``;
3. scores a fixed batch with bilm-tf's graph in test mode (full softmax, no dropout, zero initial state) and writes
   the inputs and TF's losses to ``reference_batch.json``;
4. lists every variable of the checkpoint with TF's own reader (``tf.train.load_checkpoint``): dtype, shape, sha256
   of its little-endian bytes and sum, in ``variables.json``.

Kept: ``checkpoint``, ``model.ckpt-N.index``, ``model.ckpt-N.data-00000-of-00001``, ``options.json``, ``vocab.txt``
and the files above (not the ``.meta`` graph, which bilm-tf never reads back, nor TensorBoard events).

Models: ``two-layer`` (1 highway layer, a CNN projection, 2 projected LSTM layers with clipping and a skip
connection; the released vocabulary's special-token order ``</S>, <S>, <UNK>`` and its trailing ``!!!MAXTERMID``
line) and ``one-layer`` (no highway, no CNN projection, 1 LSTM layer without projection, so TF names it
``rnn/lstm_cell`` without ``multi_rnn_cell``; the README's order ``<S>, </S>, <UNK>``).
"""

from __future__ import annotations

import argparse
import collections
import glob
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

# TF 2's Keras 3 has no v1 LSTMCell; tf-keras (Keras 2) provides tf.compat.v1.nn.rnn_cell.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow  # noqa: E402

tf = tensorflow.compat.v1
tf.disable_v2_behavior()
sys.modules["tensorflow"] = tf  # bilm-tf is TF 1 code: `import tensorflow as tf` must give the v1 API

from bilm.data import BidirectionalLMDataset  # noqa: E402
from bilm.training import LanguageModel, dump_weights, load_vocab, train  # noqa: E402

SENTENCES = 60  # corpus lines used (whitespace-tokenised, as bilm-tf reads its training files)
VOCABULARY_WORDS = 27  # words besides the three special tokens
BATCH_SIZE, UNROLL_STEPS, TRAINING_BATCHES = 2, 4, 3
REFERENCE_BATCH_SIZE, REFERENCE_UNROLL_STEPS = 2, 5

MODELS = {
    "two-layer": dict(
        special_order=("</S>", "<S>", "<UNK>"),  # as the released vocab-2016-09-10.txt
        trailing_line="!!!MAXTERMID",  # as the released vocabulary file ends
        char_cnn={
            "activation": "relu", "embedding": {"dim": 4}, "filters": [[1, 4], [2, 4], [3, 8]],
            "max_characters_per_token": 50, "n_characters": 261, "n_highway": 1,
        },
        lstm={"cell_clip": 3, "dim": 8, "n_layers": 2, "proj_clip": 3, "projection_dim": 4, "use_skip_connections": True},
    ),
    "one-layer": dict(
        special_order=("<S>", "</S>", "<UNK>"),
        trailing_line=None,
        char_cnn={
            "activation": "tanh", "embedding": {"dim": 4}, "filters": [[1, 4], [2, 4]],
            "max_characters_per_token": 50, "n_characters": 261, "n_highway": 0,
        },
        # No clip keys: bilm-tf passes cell_clip straight to LSTMCell, where 0 would clip to [0, 0] (AllenNLP: no clip).
        lstm={"dim": 8, "n_layers": 1, "projection_dim": 8, "use_skip_connections": False},
    ),
}


def corpus_lines(corpus: Path) -> list[str]:
    lines = [line.strip() for line in corpus.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line and "<S>" not in line and "</S>" not in line][:SENTENCES]


def write_vocabulary(lines: list[str], path: Path, special_order, trailing_line) -> int:
    """bilm-tf's vocabulary file: special tokens, then words by count (ties by word). Returns its size as bilm-tf
    counts it (the !!!MAXTERMID line is skipped)."""
    counts = collections.Counter(word for line in lines for word in line.split())
    words = [word for word, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))][:VOCABULARY_WORDS]
    entries = list(special_order) + words + ([trailing_line] if trailing_line else [])
    path.write_text("".join(f"{entry}\n" for entry in entries), encoding="utf-8")
    return len(special_order) + len(words)


def training_options(model: dict, vocabulary_size: int) -> dict:
    return {
        "bidirectional": True,
        "char_cnn": model["char_cnn"],
        "lstm": model["lstm"],
        "dropout": 0.1,
        "all_clip_norm_val": 10.0,
        "n_epochs": 1,
        "n_train_tokens": TRAINING_BATCHES * BATCH_SIZE * UNROLL_STEPS,
        "batch_size": BATCH_SIZE,
        "n_tokens_vocab": vocabulary_size,
        "unroll_steps": UNROLL_STEPS,
        "n_negative_samples_batch": 8,
    }


def train_checkpoint(options: dict, vocabulary_file: Path, train_file: Path, save_dir: Path, log_dir: Path) -> None:
    random.seed(0)
    np.random.seed(0)
    vocabulary = load_vocab(str(vocabulary_file), options["char_cnn"]["max_characters_per_token"])
    data = BidirectionalLMDataset(str(train_file), vocabulary, test=False, shuffle_on_load=True)
    with tf.Graph().as_default():
        tf.set_random_seed(0)
        train(options, data, 1, str(save_dir), str(log_dir))


def score_reference_batch(options: dict, vocabulary_file: Path, train_file: Path, checkpoint: str) -> dict:
    """bilm-tf's test-mode losses (full softmax, no dropout, zero state) on the first batch of the corpus."""
    options = dict(options, batch_size=REFERENCE_BATCH_SIZE, unroll_steps=REFERENCE_UNROLL_STEPS)
    vocabulary = load_vocab(str(vocabulary_file), options["char_cnn"]["max_characters_per_token"])
    data = BidirectionalLMDataset(str(train_file), vocabulary, test=True, shuffle_on_load=False)
    batch = next(data.iter_batches(REFERENCE_BATCH_SIZE, REFERENCE_UNROLL_STEPS))
    with tf.Graph().as_default(), tf.Session() as session:
        with tf.variable_scope("lm"):
            model = LanguageModel(options, False)
        tf.train.Saver().restore(session, checkpoint)
        feed = {
            model.tokens_characters: batch["tokens_characters"],
            model.next_token_id: batch["next_token_id"],
            model.tokens_characters_reverse: batch["tokens_characters_reverse"],
            model.next_token_id_reverse: batch["next_token_id_reverse"],
        }
        forward, backward, total = session.run(model.individual_losses + [model.total_loss], feed_dict=feed)
    return {
        "note": "bilm-tf LanguageModel(options, is_training=False) on the first batch of BidirectionalLMDataset(test=True, "
        "shuffle_on_load=False): training character ids (no +1 shift), bilm-tf word ids (vocab.txt line order), "
        "zero initial LSTM state; losses are mean NLL per direction (full softmax) and their mean",
        "batch_size": REFERENCE_BATCH_SIZE,
        "unroll_steps": REFERENCE_UNROLL_STEPS,
        "tokens_characters": batch["tokens_characters"].tolist(),
        "next_token_id": batch["next_token_id"].tolist(),
        "tokens_characters_reverse": batch["tokens_characters_reverse"].tolist(),
        "next_token_id_reverse": batch["next_token_id_reverse"].tolist(),
        "forward_loss": float(forward),
        "backward_loss": float(backward),
        "total_loss": float(total),
    }


def list_variables(checkpoint: str) -> dict:
    """Every variable as TF's own checkpoint reader returns it."""
    reader = tensorflow.train.load_checkpoint(checkpoint)
    variables = {}
    for name, shape in sorted(tensorflow.train.list_variables(checkpoint)):
        value = np.asarray(reader.get_tensor(name))
        little_endian = value.astype(value.dtype.newbyteorder("<"), copy=False)
        variables[name] = {
            "dtype": value.dtype.name,
            "shape": list(shape),
            "sha256": hashlib.sha256(np.ascontiguousarray(little_endian).tobytes()).hexdigest(),
            "sum": float(np.sum(value, dtype=np.float64)),
        }
    return variables


def make_model(name: str, model: dict, lines: list[str], output: Path, work: Path) -> None:
    target, save_dir, log_dir = output / name, work / name / "save", work / name / "log"
    for directory in (target, save_dir, log_dir):
        directory.mkdir(parents=True, exist_ok=True)
    train_file = work / name / "train.txt"
    train_file.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    vocabulary_file = target / "vocab.txt"
    options = training_options(model, write_vocabulary(lines, vocabulary_file, model["special_order"], model["trailing_line"]))

    train_checkpoint(options, vocabulary_file, train_file, save_dir, log_dir)
    checkpoint = tf.train.latest_checkpoint(str(save_dir))
    with tf.Graph().as_default():
        dump_weights(str(save_dir), str(target / "weights.hdf5"))
    reference = score_reference_batch(options, vocabulary_file, train_file, checkpoint)
    (target / "reference_batch.json").write_text(json.dumps(reference) + "\n", encoding="utf-8")
    (target / "variables.json").write_text(json.dumps(list_variables(checkpoint), indent=1) + "\n", encoding="utf-8")

    shutil.copyfile(save_dir / "options.json", target / "options.json")  # as bilm-tf's train() wrote it
    shutil.copyfile(save_dir / "checkpoint", target / "checkpoint")  # names the training directory's absolute path
    for path in glob.glob(f"{checkpoint}.index") + glob.glob(f"{checkpoint}.data-*"):
        shutil.copyfile(path, target / Path(path).name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="a text file; its first lines are the training data")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    lines = corpus_lines(args.corpus)
    with tempfile.TemporaryDirectory(prefix="bilm-tf-fixture-") as work:
        for name, model in MODELS.items():
            shutil.rmtree(args.output / name, ignore_errors=True)
            make_model(name, model, lines, args.output, Path(work))
    print(f"TensorFlow {tensorflow.__version__}; wrote {args.output}")


if __name__ == "__main__":
    main()
