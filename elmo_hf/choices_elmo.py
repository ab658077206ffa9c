"""The values elmo-hf's options accept: one home for each list, read by the library (which checks them) and by the
``elmo-hf`` command (which rejects a wrong value before torch is imported, see ``elmo_hf_cli``).

This file imports nothing but ``os``, so that the command line can read it before it imports torch (``elmo_hf``'s
``__init__`` is lazy and imports none of its modules), and so that the remote-code files
(configuration, modeling) can use it when they are copied next to a checkpoint.
"""

import os

# What `--model` stands for when no model is named (`elmo_hf.DEFAULT_MODEL_DIR`): the checkpoint shipped inside the
# package (pre-trained here by `elmo-hf pretrain`, packaged by `scripts/package_default_model.py`), so that
# `elmo-hf embed` runs with no network. A small demonstration model, not for quality: see its README.md. A str, as every
# from_pretrained and pipeline takes. (Next to a checkpoint, as remote code, this names a folder that is not there.)
DEFAULT_MODEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default_model")

# Which vectors of an output a user takes (ELMoModelOutput.word_vectors), besides an int layer index (0 = token layer):
# "mix" a scalar mix (the paper's ELMo_k), "top" the top biLSTM layer, "average" the plain mean of the L + 1 layers,
# "all" every layer stacked.
REPRESENTATIONS = ("mix", "top", "average", "all")

# Sentence vectors from word vectors, everywhere (pooling_elmo.pool_words: the model's output, the pipeline, the
# embedder, sentence-transformers, the heads): "mean" / "max" over the real words, "mean_max" the two concatenated,
# "first_last" the first word's vector concatenated with the last word's.
POOLINGS = ("mean", "max", "mean_max", "first_last")
# What an output of vectors may hold: "none" per-word vectors, or a sentence vector pooled as above.
OUTPUT_POOLINGS = ("none", *POOLINGS)

# How stored vectors are kept (ELMoEmbedder's `dtype`, `elmo-hf embed --dtype`).
STORAGE_DTYPES = ("float32", "float16")
# Dtypes the model can compute in (`compute_dtype`: its weights are cast). float32 is exact; bfloat16 and float16 give
# per-word cosines >= 0.999 to float32 (tests/test_fast_elmo.py) and are fast only on hardware that has them. int8
# (CPU only) keeps the float32 weights and runs the LSTM matmuls and the token layer's convolutions and highways on
# quantized copies (int8_elmo.py; error and speed: docs/results/int8.md).
COMPUTE_DTYPES = ("float32", "bfloat16", "float16", "int8")

# Tagging schemes whose transitions a token-classification CRF can constrain (`task_crf_constraints`,
# crf_elmo.allowed_transitions): B-/I-/O, or B-/I-/O/U-/L- (unit and last word of an entity).
TAGGING_SCHEMES = ("BIO", "BIOUL")

# Corpus formats (`--input-format`) are the rows of one table with their readers: elmo_hf/corpus/formats.py.
# How `elmo-hf embed` writes: Parquet shards, or also a saved dataset (elmo_hf.embedding.driver).
OUTPUT_FORMATS = ("parquet", "dataset")

# FAISS index kinds of `elmo-hf neighbours build` (elmo_hf.search.index).
INDEX_KINDS = ("flat", "ivf", "ivfpq")

# How text is split into words (word_splitters_elmo.build_word_splitter): Penn Treebank or Moses rules, white space,
# the space character alone (a TF-Hub ELMo's `default` signature), BERT's basic pre-tokenizer, or Korean morphemes by
# an analyser (kiwipiepy, python-mecab-ko).
WORD_SPLITTERS = ("ptb", "moses", "whitespace", "space", "bert", "kiwi", "mecab")

# Pre-training (elmo_hf.pretraining.run): the batching regime, the optimizer name -> (transformers `optim`, default
# learning rate; see docs/guide/pretraining.md for the comparison) and the learning-rate schedule after warm-up.
REGIMES = ("windowed", "sentence")
OPTIMIZERS: dict[str, tuple[str, float]] = {"adam": ("adamw_torch", 5e-3), "adagrad": ("adagrad", 0.2)}
LR_SCHEDULERS = ("linear", "constant", "cosine")

__all__ = [
    "COMPUTE_DTYPES",
    "DEFAULT_MODEL_DIR",
    "INDEX_KINDS",
    "LR_SCHEDULERS",
    "OPTIMIZERS",
    "OUTPUT_FORMATS",
    "OUTPUT_POOLINGS",
    "POOLINGS",
    "REGIMES",
    "REPRESENTATIONS",
    "STORAGE_DTYPES",
    "TAGGING_SCHEMES",
    "WORD_SPLITTERS",
]
