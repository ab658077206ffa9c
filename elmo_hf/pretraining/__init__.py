"""Pre-training (``elmo-hf pretrain``): ``options.py`` (``PretrainingOptions``, ``PretrainingReport``), ``data.py``
(per-sentence batches and bilm-tf's windows), ``trainer.py`` (the carried LSTM state), ``initial_model.py``
(``--init-from``) and ``run.py`` (``pretrain``: options -> data -> model -> train -> report). The LM heads' word
vocabulary is ``elmo_hf.corpus.vocabulary``; scoring text with a trained model is ``elmo_hf.scoring`` (both
re-exported here, where they were first documented)."""

from ..corpus.vocabulary import ELMoWordVocabulary
from ..scoring import CorpusScore, ELMoLanguageModelScorer, LexicalSubstitute, SentenceScore, WordPrediction
from .data import DataCollatorForBiLM, WindowedBiLMStream
from .options import PretrainingError, PretrainingInterrupted, PretrainingOptions, PretrainingReport
from .run import pretrain

__all__ = [
    "CorpusScore", "DataCollatorForBiLM", "ELMoLanguageModelScorer", "ELMoWordVocabulary", "LexicalSubstitute",
    "PretrainingError", "PretrainingInterrupted", "PretrainingOptions", "PretrainingReport", "SentenceScore",
    "WindowedBiLMStream", "WordPrediction", "pretrain",
]
