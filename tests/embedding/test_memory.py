"""Peak RSS of `elmo-hf embed` does not grow with the corpus: 10x the sentences, about the same peak.

Uses benchmarks/embed_memory.py with a small random model whose outputs are large (all layers, 2 x 512 floats per
word), so holding the output in memory would show: ~240 MB at 6,000 sentences. The smaller run has 600 sentences (12
shards) so that the warm-up is over in both (allocator, oneDNN's kernels for each shape, the token-layer cache):
measured 300 -> 3,000 -> 6,000 sentences: 631 -> 679 -> 687 MB. No timing is asserted.
"""

from __future__ import annotations

import pytest

from benchmarks.embed_memory import build_random_model, run_benchmark

WIDE_CHEAP_MODEL = dict(
    char_cnn_filters=[[1, 16], [2, 16], [3, 32]], num_highway_layers=1, projection_dim=256, lstm_cell_size=256, num_lstm_layers=1
)


@pytest.mark.slow  # two embed runs in fresh processes (22 s); benchmarks/embed_memory.py measures the same
def test_peak_memory_is_flat_in_corpus_size(tmp_path):
    model_dir = build_random_model(WIDE_CHEAP_MODEL, tmp_path / "model")
    report = run_benchmark(model_dir, None, lines=300, scales=[2, 20], extra_args=["--representation", "all", "--shard-size", "50"], work_dir=tmp_path)

    assert report["runs"]["20x"]["sentences"] == 10 * report["runs"]["2x"]["sentences"] == 6000
    assert report["vectors_mb_at_largest"] > 200
    assert report["peak_rss_growth_mb"] < 0.4 * report["vectors_mb_at_largest"], report
