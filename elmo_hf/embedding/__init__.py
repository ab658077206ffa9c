"""Bulk embedding: ``embedder.py`` (``ELMoEmbedder``, the ``datasets.map`` function; ``batching.py``, its windows
and model batches), ``driver.py`` (``embed_corpus``, the resumable Parquet shards of ``elmo-hf embed``), ``engine.py``
(the task runner that splits, embeds and writes each shard, in this process or in ``workers.py``'s processes),
``manifest.py`` (the output's record, its resume and verification, without torch), ``parquet.py`` (Arrow and Parquet,
shared with the Ray engine and ``elmo_hf.search``), ``shard_names.py`` (the files' names) and ``ray_engine.py`` (the
Ray Data engine, optional extra)."""

from .driver import embed_corpus
from .embedder import DEFAULT_MODEL_DIR, ELMoEmbedder, embed_dataset, embed_texts
from .manifest import EmbeddingRunSummary, Manifest

__all__ = ["DEFAULT_MODEL_DIR", "ELMoEmbedder", "EmbeddingRunSummary", "Manifest", "embed_corpus", "embed_dataset", "embed_texts"]
