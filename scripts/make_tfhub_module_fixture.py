"""Write tests/fixtures/tfhub-module/: tiny ELMo TF-Hub modules (TF1 Hub format) exported by tensorflow-hub itself.

Run in a throwaway environment, never in elmo-hf's (TensorFlow is no dependency of elmo-hf; the tests read only the
committed outputs). tensorflow-hub 0.12 is the last release that writes the TF1 Hub format
(``hub.create_module_spec`` + ``Module.export``); it imports TensorFlow internals that TensorFlow 2.11 moved, so it
runs with TensorFlow <= 2.10, which needs Python <= 3.10:

    python3.10 -m venv /tmp/tfhub-env
    /tmp/tfhub-env/bin/pip install tensorflow-cpu==2.10.1 tensorflow-hub==0.12.0 protobuf==3.19.6 "numpy<1.24" \\
        h5py bilm==0.1.post5
    /tmp/tfhub-env/bin/python scripts/make_tfhub_module_fixture.py --output tests/fixtures/tfhub-module

bilm 0.1.post5 (PyPI) is allenai/bilm-tf at its last commit, TensorFlow 1 code, run through ``tf.compat.v1``
(installed as the ``tensorflow`` module before bilm is imported). For each module below the script:

1. writes random weights in bilm-tf's ``weights.hdf5`` layout and ``options.json`` (the original ELMo's settings:
   relu, clip 3, skip connections, 50 characters per token, at a tiny size);
2. builds bilm-tf's own ``BidirectionalLanguageModel`` on them inside a ``module_fn`` with google/elmo's interface:
   signature ``tokens`` (``tokens`` [B, T] strings, ``sequence_len`` [B]) and ``default`` (a batch of sentences,
   split on spaces), both with the outputs ``word_emb``, ``lstm_outputs1``, ``lstm_outputs2``, ``elmo`` and
   ``default``; the graph turns words into character ids (UTF-8 bytes, cut to 48, ``<S>`` / ``</S>``, +1 shift)
   as bilm-tf's ``Batcher`` does;
3. exports it with ``hub.create_module_spec(module_fn)`` and ``hub.Module(spec).export(...)`` and packs the
   directory as ``NAME.tar.gz``, its files at the archive's root as in a compressed TF-Hub download (the tests
   extract it for the directory form);
4. loads the exported directory back with ``hub.Module`` and writes its outputs, both signatures, first call (the
   zero state) and second call (the state the first one left) to ``NAME-reference_outputs.npz``.

Modules: ``google-style`` (the mix as google/elmo names it: ``aggregation/weights`` [3], ``aggregation/scaling`` [],
``default`` the mean of ``elmo`` over the words) and ``deeppavlov-style`` (bilm-tf's ``weight_layers`` names under
``aggregation/`` as DeepPavlov's exporter writes them: ``aggregation/elmo_output_ELMo_W`` [3],
``aggregation/elmo_output_ELMo_gamma`` [1]; ``default`` the mean of the mix before gamma, as that exporter
computes it). The ``module_fn`` is written here after google/elmo's documented interface, not copied from an exporter.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow  # noqa: E402

tf = tensorflow.compat.v1
tf.disable_v2_behavior()
sys.modules["tensorflow"] = tf  # bilm-tf is TF 1 code: `import tensorflow as tf` must give the v1 API

import tensorflow_hub as hub  # noqa: E402
from bilm.model import BidirectionalLanguageModel  # noqa: E402

MAX_CHARACTERS = 50  # character slots per word, bilm-tf's and google/elmo's
BEGIN_SENTENCE, END_SENTENCE, BEGIN_WORD, END_WORD, PADDING_CHARACTER = 256, 257, 258, 259, 260  # before the +1 shift
MAX_BATCH_SIZE = 4  # rows of bilm-tf's LSTM state buffers (exported with the module)
OPTIONS = {
    "char_cnn": {
        "activation": "relu", "embedding": {"dim": 4}, "filters": [[1, 4], [2, 4], [3, 8]],
        "max_characters_per_token": MAX_CHARACTERS, "n_characters": 262, "n_highway": 2,
    },
    "lstm": {"cell_clip": 3, "dim": 8, "n_layers": 2, "proj_clip": 3, "projection_dim": 4, "use_skip_connections": True},
}
MODULES = {
    "google-style": dict(seed=1, mix_names=("weights", "scaling"), scaling_shape=(), default_pools_scaled=True),
    "deeppavlov-style": dict(
        seed=2, mix_names=("elmo_output_ELMo_W", "elmo_output_ELMo_gamma"), scaling_shape=(1,), default_pools_scaled=False
    ),
}
# Standard deviation of the random weights by name prefix: vectors of order 1 at every layer, so that a parity bound
# of 1e-6 is a few float32 steps and not a rounding artefact of large values.
WEIGHT_SCALES = (("char_embed", 1.0), ("CNN/", 0.3), ("CNN_high", 0.15), ("CNN_proj", 0.3), ("RNN", 0.5))
MIX_WEIGHTS, MIX_SCALING = [0.4, -0.7, 0.9], 1.7  # trained-looking values, so that the mix is not a plain average
# Inputs of the reference outputs: a padded batch of words (multi-byte UTF-8, a word cut to 48 bytes) and sentences
# with runs of spaces, a tab (not a separator) and leading / trailing spaces.
TOKENS = [
    ["The", "cat", "sat", "on", "the", "mat"],
    ["Zürich", "日本語", "x" * 60, "", "", ""],
    ["dogs", "bark", "", "", "", ""],
]
SEQUENCE_LEN = [6, 3, 2]
STRINGS = ["The cat  sat on the mat", " dogs\tbark loudly at  night ", "Zürich 日本語"]


def write_weights(path: Path, rng: np.random.Generator) -> None:
    """Random weights in bilm-tf's weights.hdf5 layout (char_embed without the padding token's row)."""
    char_cnn, lstm = OPTIONS["char_cnn"], OPTIONS["lstm"]
    embedding_dim, filters = char_cnn["embedding"]["dim"], char_cnn["filters"]
    width, projection, cell = sum(count for _, count in filters), lstm["projection_dim"], lstm["dim"]
    shapes = {"char_embed": (char_cnn["n_characters"] - 1, embedding_dim)}
    for index, (filter_width, count) in enumerate(filters):
        shapes[f"CNN/W_cnn_{index}"], shapes[f"CNN/b_cnn_{index}"] = (1, filter_width, embedding_dim, count), (count,)
    for index in range(char_cnn["n_highway"]):
        for kind in ("carry", "transform"):
            shapes[f"CNN_high_{index}/W_{kind}"], shapes[f"CNN_high_{index}/b_{kind}"] = (width, width), (width,)
    shapes["CNN_proj/W_proj"], shapes["CNN_proj/b_proj"] = (width, projection), (projection,)
    for direction in range(2):
        for layer in range(lstm["n_layers"]):
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            shapes[f"{prefix}/W_0"], shapes[f"{prefix}/B"] = (2 * projection, 4 * cell), (4 * cell,)
            shapes[f"{prefix}/W_P_0"] = (cell, projection)
    with h5py.File(path, "w") as weights:
        for name, shape in shapes.items():
            scale = next(scale for prefix, scale in WEIGHT_SCALES if name.startswith(prefix))
            weights.create_dataset(name, data=rng.normal(0.0, scale, shape).astype(np.float32))


def word_character_ids(words):
    """[N] strings -> [N, 50] int32: <w> UTF-8 bytes (cut to 48) </w> padding, each id + 1 (bilm-tf's Batcher)."""
    length = tf.minimum(tf.strings.length(words, unit="BYTE"), MAX_CHARACTERS - 2)[:, None]  # [N, 1]
    raw = tf.cast(tensorflow.io.decode_raw(words, tf.uint8, fixed_length=MAX_CHARACTERS - 2), tf.int32)  # [N, 48] zero-padded
    slots = tf.range(MAX_CHARACTERS - 2)[None, :]
    body = tf.where(slots < length, raw, tf.where(tf.equal(slots, length), END_WORD + 0 * raw, PADDING_CHARACTER + 0 * raw))
    begin = tf.fill([tf.shape(words)[0], 1], BEGIN_WORD)
    end = tf.fill([tf.shape(words)[0], 1], PADDING_CHARACTER)  # slot 49: END_WORD only for a word of 48 bytes
    ids = tf.concat([begin, body, end], axis=1)
    cut = tf.equal(length, MAX_CHARACTERS - 2)  # a word of 48 bytes or more: </w> in the last slot
    ids = tf.where(tf.tile(cut, [1, MAX_CHARACTERS]) & tf.equal(tf.range(MAX_CHARACTERS)[None, :], MAX_CHARACTERS - 1), END_WORD + 0 * ids, ids)
    return ids + 1


def boundary_row(character: int):
    row = np.full(MAX_CHARACTERS, PADDING_CHARACTER, dtype=np.int32)
    row[:3] = [BEGIN_WORD, character, END_WORD]
    return tf.constant(row + 1)


def sentence_character_ids(tokens, sequence_len):
    """[B, T] strings, [B] lengths -> [B, T + 2, 50]: <S> words </S>, then all-zero padding rows."""
    batch, time = tf.shape(tokens)[0], tf.shape(tokens)[1]
    words = tf.reshape(word_character_ids(tf.reshape(tokens, [-1])), [batch, time, MAX_CHARACTERS])
    valid = tf.range(time)[None, :] < sequence_len[:, None]  # [B, T]
    words = words * tf.cast(valid, tf.int32)[:, :, None]
    begin = tf.tile(boundary_row(BEGIN_SENTENCE)[None, None, :], [batch, 1, 1])
    ids = tf.concat([begin, words, tf.zeros([batch, 1, MAX_CHARACTERS], tf.int32)], axis=1)
    at_end = tf.equal(tf.range(time + 2)[None, :], sequence_len[:, None] + 1)[:, :, None]  # [B, T + 2, 1]
    return tf.where(tf.tile(at_end, [1, 1, MAX_CHARACTERS]), tf.tile(boundary_row(END_SENTENCE)[None, None, :], [batch, time + 2, 1]), ids)


def elmo_outputs(bilm, character_ids, module: dict, reuse: bool) -> dict:
    """google/elmo's five outputs from bilm-tf's ops (boundaries removed by bilm-tf)."""
    ops = bilm(character_ids)
    layers, mask = ops["lm_embeddings"], tf.cast(ops["mask"], tf.float32)  # [B, 3, T, 2P], [B, T]
    projection = OPTIONS["lstm"]["projection_dim"]
    weights_name, scaling_name = module["mix_names"]
    with tf.variable_scope("aggregation", reuse=reuse):
        weights = tf.get_variable(weights_name, [3], initializer=tf.constant_initializer(MIX_WEIGHTS))
        scaling = tf.get_variable(scaling_name, module["scaling_shape"], initializer=tf.constant_initializer(MIX_SCALING))
        normalized = tf.nn.softmax(weights)
        unscaled = tf.add_n([normalized[index] * layers[:, index] for index in range(3)])
        elmo = scaling * unscaled
    pooled = elmo if module["default_pools_scaled"] else unscaled
    count = tf.maximum(tf.reduce_sum(mask, axis=1, keepdims=True), 1.0)
    default = tf.reduce_sum(pooled * mask[:, :, None], axis=1) / count
    return {
        "word_emb": layers[:, 0, :, :projection], "lstm_outputs1": layers[:, 1], "lstm_outputs2": layers[:, 2],
        "elmo": elmo, "default": default,
    }


def module_fn_for(options_file: Path, weight_file: Path, module: dict):
    def module_fn():
        bilm = BidirectionalLanguageModel(str(options_file), str(weight_file), max_batch_size=MAX_BATCH_SIZE)
        tokens = tf.placeholder(tf.string, [None, None])
        sequence_len = tf.placeholder(tf.int32, [None])
        outputs = elmo_outputs(bilm, sentence_character_ids(tokens, sequence_len), module, reuse=False)
        hub.add_signature("tokens", {"tokens": tokens, "sequence_len": sequence_len}, outputs)

        strings = tf.placeholder(tf.string, [None])
        split = tf.string_split(strings, delimiter=" ")  # on spaces only, empty pieces skipped
        words = tf.sparse.to_dense(split, default_value="")
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(words, ""), tf.int32), axis=1)
        outputs = elmo_outputs(bilm, sentence_character_ids(words, lengths), module, reuse=True)
        hub.add_signature("default", strings, outputs)

    return module_fn


def export_module(name: str, module: dict, work: Path) -> Path:
    rng = np.random.default_rng(module["seed"])
    options_file, weight_file = work / f"{name}-options.json", work / f"{name}-weights.hdf5"
    options_file.write_text(json.dumps(OPTIONS), encoding="utf-8")
    write_weights(weight_file, rng)
    spec = hub.create_module_spec(module_fn_for(options_file, weight_file, module))
    target = work / name
    with tf.Graph().as_default():
        exported = hub.Module(spec)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            exported.export(str(target), session)
    return target


def reference_outputs(module_dir: Path) -> dict:
    """Both signatures, called twice on one loaded module (the second call starts from the first one's state)."""
    arrays = {"tokens": np.array(TOKENS), "sequence_len": np.array(SEQUENCE_LEN, dtype=np.int32), "strings": np.array(STRINGS)}
    with tf.Graph().as_default():
        module = hub.Module(str(module_dir))
        by_tokens = module({"tokens": TOKENS, "sequence_len": SEQUENCE_LEN}, signature="tokens", as_dict=True)
        by_strings = module(STRINGS, signature="default", as_dict=True)
        with tf.Session() as session:
            session.run([tf.global_variables_initializer(), tf.tables_initializer()])
            for call in (1, 2):
                values = session.run({"tokens": by_tokens, "default": by_strings})
                for signature, outputs in values.items():
                    for key, value in outputs.items():
                        arrays[f"{signature}/{key}/call{call}"] = value
    return arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfhub-fixture-") as work:
        args.output.mkdir(parents=True, exist_ok=True)
        for name, module in MODULES.items():
            module_dir = export_module(name, module, Path(work))
            np.savez_compressed(args.output / f"{name}-reference_outputs.npz", **reference_outputs(module_dir))
            with tarfile.open(args.output / f"{name}.tar.gz", "w:gz") as archive:
                archive.add(module_dir, arcname=".")
    print(f"TensorFlow {tensorflow.__version__}, tensorflow-hub {hub.__version__}; wrote {args.output}")


if __name__ == "__main__":
    main()
