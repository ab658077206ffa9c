"""Bulk embedding: ``embedder.py`` (``ELMoEmbedder``, the ``datasets.map`` function; ``batching.py``, its windows
and model batches), ``driver.py`` (``embed_corpus``, the resumable Parquet shards of ``elmo-hf embed``), ``engine.py``
(the task runner that splits, embeds and writes each shard, in this process or in ``workers.py``'s processes),
``manifest.py`` (the output's record, its resume and verification, without torch), ``parquet.py`` (Arrow and Parquet,
shared with the Ray engine and ``elmo_hf.search``), ``shard_names.py`` (the files' names) and ``ray_engine.py`` (the
Ray Data engine, optional extra). Lazy like the package (``elmo_hf/__init__.py``): a name below imports its module on
first use, so that ``elmo_hf.embedding.manifest`` imports without torch."""

from __future__ import annotations

from .. import lazy_names

# Public name -> the module of this package that defines it.
LAZY_NAMES = {
    "DEFAULT_MODEL_DIR": "embedder", "ELMoEmbedder": "embedder", "embed_dataset": "embedder", "embed_texts": "embedder",
    "EmbeddingRunSummary": "manifest", "Manifest": "manifest", "embed_corpus": "driver",
}


__getattr__, __dir__ = lazy_names(__name__, LAZY_NAMES)

__all__ = ["DEFAULT_MODEL_DIR", "ELMoEmbedder", "EmbeddingRunSummary", "Manifest", "embed_corpus", "embed_dataset", "embed_texts"]
