"""The CRF (`elmo_hf/crf_elmo.py`) against brute-force enumeration of every tag path on small random cases."""

import itertools

import pytest
import torch

from elmo_hf.crf_elmo import FORBIDDEN, ConditionalRandomField, allowed_transitions

BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
BIOUL = {0: "O", 1: "B-PER", 2: "I-PER", 3: "L-PER", 4: "U-PER", 5: "U-LOC"}


def random_crf(num_tags, constraints=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    crf = ConditionalRandomField(num_tags, constraints).double()
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    return crf


def path_score(crf, emissions, path):
    """score(y) written out, with every forbidden step's penalty."""
    score = crf.start_transitions[path[0]] + (0.0 if crf.allowed_start[path[0]] else FORBIDDEN)
    for index, tag in enumerate(path):
        score = score + emissions[index, tag]
        if index:
            previous = path[index - 1]
            score = score + crf.transitions[previous, tag] + (0.0 if crf.allowed_transitions[previous, tag] else FORBIDDEN)
    return score + crf.end_transitions[path[-1]] + (0.0 if crf.allowed_end[path[-1]] else FORBIDDEN)


def enumerated(crf, emissions, length, labels=None):
    """(log Z, log Z over the paths agreeing with labels, best path) by listing every path of `length` words."""
    scores, gold, paths = [], [], []
    for path in itertools.product(range(crf.num_tags), repeat=length):
        score = path_score(crf, emissions, path)
        scores.append(score)
        paths.append(list(path))
        if labels is not None and all(label in (-100, tag) for label, tag in zip(labels, path)):
            gold.append(score)
    best = paths[int(torch.stack(scores).argmax())]
    log_z = torch.logsumexp(torch.stack(scores), 0)
    return log_z, (torch.logsumexp(torch.stack(gold), 0) if gold else None), best


CASES = [(None, 3), (BIO, 5), (BIOUL, 6)]


@pytest.mark.parametrize("labels_names, num_tags", CASES, ids=["free", "BIO", "BIOUL"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_log_partition_likelihood_and_viterbi_equal_enumeration(labels_names, num_tags, seed):
    constraints = None if labels_names is None else allowed_transitions(labels_names, "BIO" if len(labels_names) == 5 else "BIOUL")
    crf = random_crf(num_tags, constraints, seed)
    generator = torch.Generator().manual_seed(100 + seed)
    lengths = [4, 1, 3, 0, 2]
    words = max(lengths)
    emissions = torch.randn(len(lengths), words, num_tags, generator=generator, dtype=torch.float64)
    mask = torch.tensor([[index < length for index in range(words)] for length in lengths])
    labels = torch.randint(0, num_tags, (len(lengths), words), generator=generator)
    labels[0, 1] = -100  # a word left open inside a sentence
    labels[~mask] = -100
    log_z = crf.log_partition(emissions, mask)
    nll = crf.negative_log_likelihood(emissions, labels, mask)
    paths = crf.viterbi_decode(emissions, mask)
    for row, length in enumerate(lengths):
        assert len(paths[row]) == length
        if length == 0:
            assert log_z[row].item() == 0.0 and nll[row].item() == 0.0
            continue
        expected_z, expected_gold, best = enumerated(crf, emissions[row], length, labels[row, :length].tolist())
        assert torch.isclose(log_z[row], expected_z, rtol=0, atol=1e-9), (row, log_z[row], expected_z)
        assert torch.isclose(nll[row], expected_z - expected_gold, rtol=0, atol=1e-9)
        assert paths[row] == best


def test_gradients_pass_gradcheck_in_float64():
    crf = random_crf(5, allowed_transitions(BIO, "BIO"), seed=3)
    generator = torch.Generator().manual_seed(7)
    emissions = torch.randn(2, 3, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    labels = torch.tensor([[0, -100, 3], [1, 2, -100]])
    names = ("transitions", "start_transitions", "end_transitions")
    parameters = tuple(getattr(crf, name).detach().clone().requires_grad_(True) for name in names)

    def loss(emissions, *values):
        return torch.func.functional_call(crf, dict(zip(names, values)), (emissions, labels, mask))

    crf.forward = crf.negative_log_likelihood  # functional_call calls forward
    assert torch.autograd.gradcheck(loss, (emissions, *parameters))


@pytest.mark.parametrize("scheme, names", [("BIO", BIO), ("BIOUL", BIOUL)])
def test_constrained_decoding_never_takes_a_forbidden_transition(scheme, names):
    start, transitions, end = allowed_transitions(names, scheme)
    crf = ConditionalRandomField(len(names), (start, transitions, end))
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():  # scores that pull hard towards forbidden paths
        crf.transitions.copy_(torch.randn(len(names), len(names), generator=generator) * 5 + (~transitions) * 20.0)
    emissions = torch.randn(64, 9, len(names), generator=generator) * 5
    mask = torch.ones(64, 9, dtype=torch.bool)
    mask[::3, 5:] = False
    for path in crf.viterbi_decode(emissions, mask):
        assert start[path[0]] and end[path[-1]], path
        assert all(transitions[a, b] for a, b in zip(path, path[1:])), [names[tag] for tag in path]


def test_scheme_rules():
    start, transitions, end = allowed_transitions(BIO, "BIO")
    assert not start[2] and start[1] and start[0]
    assert not transitions[0, 2] and transitions[1, 2] and transitions[2, 2] and not transitions[1, 4]
    start, transitions, end = allowed_transitions(BIOUL, "BIOUL")
    assert not start[2] and not start[3] and start[4]
    assert not end[1] and not end[2] and end[3] and end[4] and end[0]
    assert transitions[1, 2] and transitions[1, 3] and not transitions[1, 0] and not transitions[3, 2] and transitions[3, 0]


def test_refusals_name_the_label_and_scheme():
    with pytest.raises(ValueError, match="'PER' is not a BIO tag"):
        allowed_transitions({0: "O", 1: "PER"}, "BIO")
    with pytest.raises(ValueError, match="'U-PER' is not a BIO tag"):
        allowed_transitions({0: "O", 1: "U-PER"}, "BIO")
    with pytest.raises(ValueError, match="one of"):
        allowed_transitions(BIO, "IOBES")
    crf = ConditionalRandomField(3)
    with pytest.raises(ValueError, match=r"tag ids in \[0, 3\)"):
        crf.negative_log_likelihood(torch.zeros(1, 2, 3), torch.tensor([[0, 5]]), torch.ones(1, 2))


@pytest.mark.parametrize("labels_names, num_tags", CASES, ids=["free", "BIO", "BIOUL"])
def test_max_marginals_are_the_best_path_through_each_tag(labels_names, num_tags):
    constraints = None if labels_names is None else allowed_transitions(labels_names, "BIO" if len(labels_names) == 5 else "BIOUL")
    crf = random_crf(num_tags, constraints, seed=4)
    generator = torch.Generator().manual_seed(21)
    lengths = [4, 1, 3, 0]
    emissions = torch.randn(len(lengths), 4, num_tags, generator=generator, dtype=torch.float64)
    mask = torch.tensor([[index < length for index in range(4)] for length in lengths])
    scores = crf.max_marginals(emissions, mask)
    paths = crf.viterbi_decode(emissions, mask)
    for row, length in enumerate(lengths):
        assert (scores[row, length:] == 0).all()
        if length == 0:
            continue
        every_path = {path: path_score(crf, emissions[row], path) for path in itertools.product(range(num_tags), repeat=length)}
        for word in range(length):
            for tag in range(num_tags):
                best = max(score for path, score in every_path.items() if path[word] == tag)
                assert torch.isclose(scores[row, word, tag], best, rtol=0, atol=1e-9)
        assert scores[row, :length].argmax(-1).tolist() == paths[row]
