"""Pre-training and LM scoring: ``vocabulary.py`` (the LM heads' word vocabulary), ``data.py`` (per-sentence
batches and bilm-tf's windows), ``run.py`` (``pretrain``, the engine of ``elmo-hf pretrain``) and ``lm_scoring.py``
(``ELMoLanguageModelScorer``)."""

from .data import DataCollatorForBiLM, WindowedBiLMStream
from .lm_scoring import CorpusScore, ELMoLanguageModelScorer, LexicalSubstitute, SentenceScore, WordPrediction
from .run import PretrainingError, PretrainingInterrupted, PretrainingOptions, PretrainingReport, pretrain
from .vocabulary import ELMoWordVocabulary

__all__ = [
    "CorpusScore",
    "DataCollatorForBiLM",
    "ELMoLanguageModelScorer",
    "ELMoWordVocabulary",
    "LexicalSubstitute",
    "PretrainingError",
    "PretrainingInterrupted",
    "PretrainingOptions",
    "PretrainingReport",
    "SentenceScore",
    "WindowedBiLMStream",
    "WordPrediction",
    "pretrain",
]
