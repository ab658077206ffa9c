"""Scoring text with a pre-trained biLM (``ELMoForPreTraining``): sentence perplexity, next / previous words,
in-context substitutes (``lm_scoring.py``). Inference beside the model it serves, not part of the training run."""

from .lm_scoring import CorpusScore, ELMoLanguageModelScorer, LexicalSubstitute, SentenceScore, WordPrediction

__all__ = ["CorpusScore", "ELMoLanguageModelScorer", "LexicalSubstitute", "SentenceScore", "WordPrediction"]
