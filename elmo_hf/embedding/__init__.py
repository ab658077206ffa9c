"""Bulk embedding: ``embedder.py`` (``ELMoEmbedder``, the ``datasets.map`` function), ``shards.py`` (``embed_corpus``,
the resumable Parquet shards of ``elmo-hf embed``), ``manifest.py`` (their record, read and checked without torch) and
``ray_engine.py`` (the Ray Data engine, optional extra)."""

from .embedder import DEFAULT_MODEL_DIR, ELMoEmbedder, embed_dataset, embed_texts
from .shards import EmbeddingRunSummary, Manifest, embed_corpus

__all__ = ["DEFAULT_MODEL_DIR", "ELMoEmbedder", "EmbeddingRunSummary", "Manifest", "embed_corpus", "embed_dataset", "embed_texts"]
