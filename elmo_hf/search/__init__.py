"""Contextual nearest neighbours over ``elmo-hf embed`` outputs (``pip install 'elmo-hf[search]'``): ``index.py``
builds a FAISS index of every word vector (``build_index``, ``elmo-hf neighbours build``), ``neighbours.py`` queries
it (``ContextualIndex``, ``elmo-hf neighbours query``) and gives the token layer's static neighbours. FAISS itself is
imported only when an index is built or opened."""

from .index import INDEX_KINDS, IndexBuildSummary, IndexInputError, build_index
from .neighbours import ContextualIndex, Neighbour, QueryError, QueryResult, StaticNeighbour, static_neighbours

__all__ = [
    "INDEX_KINDS", "ContextualIndex", "IndexBuildSummary", "IndexInputError", "Neighbour", "QueryError", "QueryResult",
    "StaticNeighbour", "build_index", "static_neighbours",
]
