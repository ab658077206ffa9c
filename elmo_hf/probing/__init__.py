"""Layer analyses (the paper's section 5): linear probes per layer and over a learned mix, and their pictures."""

from .layer_probe import ProbeInputError, ProbeOptions, ProbeReport, TaggedSentences, probe_layers
from .plots import plot_mix_weights, plot_probe_report

__all__ = ["ProbeInputError", "ProbeOptions", "ProbeReport", "TaggedSentences", "plot_mix_weights", "plot_probe_report", "probe_layers"]
