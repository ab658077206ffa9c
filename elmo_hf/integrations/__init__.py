"""ELMo inside other libraries' frameworks, one module per library, each imported only when used:

- ``pipeline.py``: ``ELMoFeatureExtractionPipeline``, transformers' ``feature-extraction`` pipeline with ELMo's
  representations and sentence pooling (``pipeline(..., pipeline_class=ELMoFeatureExtractionPipeline)``);
- ``token_classification_pipeline.py``: ``ELMoTokenClassificationPipeline``, transformers' ``token-classification``
  pipeline for ELMo's word tokenizer (``pipeline_class=``);
- ``question_answering_pipeline.py``: ``ELMoQuestionAnsweringPipeline``, answers of an ``ELMoForQuestionAnswering`` as
  character spans of the context (built directly: transformers 5 has no ``question-answering`` pipeline);
- ``sentence_transformers.py``: ``ELMoForSentenceTransformers``, an elmo-hf model as a sentence-transformers module
  (needs the ``sentence-transformers`` extra), and ``elmo_sentence_transformer`` to build one with its pooling.

Every sentence vector comes from ``pooling_elmo.pool_words`` or, inside a ``SentenceTransformer``, from
sentence-transformers' own ``Pooling`` module with the matching mode.
"""
