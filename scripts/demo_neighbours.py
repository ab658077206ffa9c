"""The paper's "play" analysis (Peters et al. 2018, Table 4), offline: contextual nearest neighbours of a polysemous
word across sentences, next to the nearest words of its context-independent token vector.

For every sentence of the corpus containing WORD, take the word's vector in one biLM layer; for each query sentence,
print the corpus sentences whose vector of WORD is closest (cosine). The context-independent comparison (the paper's
GloVe column) is the token layer (character CNN): the vocabulary words nearest to WORD there.

    python scripts/demo_neighbours.py --model elmo_hf/default_model --word play \
        --query "I want to see the play tonight ." --query "Let us play a game ." [--layer 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch

from elmo_hf import ELMoModel, ELMoTokenizer
from elmo_hf.corpus.sentences import load_sentences

DEFAULT_CORPORA = ("tinyshakespeare.txt", "ud-english-ewt/en_ewt-ud-dev.conllu", "ud-english-ewt/en_ewt-ud-test.conllu")


def sentences_with_word(corpus: list[list[str]], word: str, limit: int) -> list[list[str]]:
    """Up to ``limit`` distinct sentences (word lists) of ``corpus`` containing ``word`` (case-sensitive)."""
    found, seen = [], set()
    for words in corpus:
        key = " ".join(words)
        if word in words and key not in seen and len(words) <= 60:
            seen.add(key)
            found.append(words)
            if len(found) == limit:
                break
    return found


@torch.inference_mode()
def word_vectors(model: ELMoModel, tokenizer: ELMoTokenizer, sentences: list[list[str]], word: str, layer: int, batch_size: int = 32) -> torch.Tensor:
    """(N, 2P) vector of the first occurrence of ``word`` in each sentence, from ``hidden_states[layer]``."""
    vectors = []
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start : start + batch_size]
        encoding = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
        hidden = model(**encoding).hidden_states[layer]  # (B, T, 2P)
        vectors.extend(hidden[row, words.index(word)] for row, words in enumerate(batch))
    return torch.stack(vectors)


@torch.inference_mode()
def token_layer_neighbours(model: ELMoModel, tokenizer: ELMoTokenizer, vocabulary: list[str], word: str, k: int) -> list[tuple[str, float]]:
    """The ``k`` vocabulary words whose context-independent token vectors are closest (cosine) to ``word``'s."""
    encoding = tokenizer([[candidate] for candidate in [word, *vocabulary]], is_split_into_words=True, padding=True, return_tensors="pt")
    tokens = model.char_embeddings(encoding["input_ids"][:, 0])  # (1 + V, P)
    similarity = torch.nn.functional.cosine_similarity(tokens[:1], tokens[1:], dim=-1)
    best = similarity.argsort(descending=True)[:k]
    return [(vocabulary[index], float(similarity[index])) for index in best.tolist()]


def nearest_sentences(
    model: ELMoModel, tokenizer: ELMoTokenizer, corpus: list[list[str]], queries: list[list[str]], word: str, layer: int, k: int
) -> list[dict]:
    corpus_vectors = word_vectors(model, tokenizer, corpus, word, layer)
    query_vectors = word_vectors(model, tokenizer, queries, word, layer)
    similarity = torch.nn.functional.cosine_similarity(query_vectors.unsqueeze(1), corpus_vectors.unsqueeze(0), dim=-1)
    results = []
    for query, scores in zip(queries, similarity):
        best = scores.argsort(descending=True)[:k].tolist()
        results.append(
            {"query": " ".join(query), "neighbours": [{"sentence": " ".join(corpus[index]), "cosine": round(float(scores[index]), 4)} for index in best]}
        )
    return results


def run(model_dir: str, corpora: list[Path], word: str, queries: list[str], layer: int, k: int, max_sentences: int) -> dict:
    model = ELMoModel.from_pretrained(model_dir).eval()
    tokenizer = ELMoTokenizer.from_pretrained(model_dir)
    split_queries = [tokenizer.tokenize(query) for query in queries]
    for query, words in zip(queries, split_queries):
        if word not in words:
            raise SystemExit(f"error: query {query!r} does not contain {word!r} (its words: {words})")
    all_sentences = [list(words) for path in corpora for words in load_sentences([path])["words"]]
    corpus = [sentence for sentence in sentences_with_word(all_sentences, word, max_sentences) if sentence not in split_queries]
    if not corpus:
        raise SystemExit(f"error: no sentence of {[str(path) for path in corpora]} contains {word!r}")
    counts = Counter(w for words in all_sentences for w in words)
    vocabulary = [candidate for candidate, count in counts.most_common(20000) if candidate != word and count >= 3]
    return {
        "model": str(model_dir),
        "word": word,
        "layer": layer,
        "corpus_sentences_with_word": len(corpus),
        "token_layer_neighbours": [{"word": w, "cosine": round(c, 4)} for w, c in token_layer_neighbours(model, tokenizer, vocabulary, word, k)],
        "contextual_neighbours": nearest_sentences(model, tokenizer, corpus, split_queries, word, layer, k),
    }


def print_report(report: dict) -> None:
    print(f"Context-independent (token layer) neighbours of {report['word']!r}:")
    print("  " + ", ".join(f"{item['word']} ({item['cosine']:.2f})" for item in report["token_layer_neighbours"]))
    print(f"\nContextual neighbours (layer {report['layer']}, {report['corpus_sentences_with_word']} corpus sentences):")
    for result in report["contextual_neighbours"]:
        print(f"\n  query: {result['query']}")
        for neighbour in result["neighbours"]:
            print(f"    {neighbour['cosine']:.3f}  {neighbour['sentence']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(Path(__file__).resolve().parents[1] / "elmo_hf" / "default_model"))
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    parser.add_argument("--word", default="play")
    parser.add_argument("--query", action="append", help="a sentence containing WORD (repeatable)")
    parser.add_argument("--layer", type=int, default=1, help="biLM layer: 0 token layer, 1..L the biLSTM layers")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--max-sentences", type=int, default=500)
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    queries = args.query or [
        "We went to see the play at the theatre last night .",
        "The children want to play football in the park .",
    ]
    corpora = [args.shared / "corpora" / name for name in DEFAULT_CORPORA]
    report = run(args.model, corpora, args.word, queries, args.layer, args.k, args.max_sentences)
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
