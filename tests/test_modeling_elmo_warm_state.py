"""The fixed warm initial state brings deterministic vectors close to the original's stateful (steady-state) ones."""

from scripts.warm_state_report import read_conllu_words, warm_state_report

from .conftest import EWT_DEV


def test_warm_state_is_much_closer_to_the_original_stateful_run(converted_fixture_dir, allennlp_fixture_dir):
    report = warm_state_report(converted_fixture_dir, allennlp_fixture_dir, EWT_DEV, warm_up_sentences=30)
    zero, warm = report["zero_state"], report["warm_state"]
    assert warm["warm_up_sentences"] == 30 and report["batches_compared"] == list(range(1, 10))
    assert zero["mean_abs_diff"] > 0.05  # the cold start really is far from the original's steady state
    assert warm["mean_abs_diff"] * 4 < zero["mean_abs_diff"]
    assert warm["min_cosine"] > 0.98 > zero["min_cosine"]


def test_conllu_reader_takes_word_forms(tmp_path):
    conllu = tmp_path / "toy.conllu"
    conllu.write_text("# text = Don't go\n1-2\tDon't\t_\n1\tDo\tdo\n2\tn't\tnot\n3\tgo\tgo\n\n# x\n1\tHi\thi\n\n")
    assert read_conllu_words(conllu, 10) == [["Do", "n't", "go"], ["Hi"]]
    assert read_conllu_words(conllu, 1) == [["Do", "n't", "go"]]
