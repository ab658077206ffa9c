"""`elmo_hf.validation_elmo`'s comparisons, which every exactness test leans on: NaN is a failure, never skipped."""

import math
import warnings

import numpy as np
import torch

from elmo_hf.validation_elmo import is_close, largest, max_abs_difference


def test_the_largest_difference_is_nan_when_either_side_has_a_nan():
    assert max_abs_difference(torch.tensor([1.0, 2.0]), torch.tensor([1.5, 2.0])) == 0.5
    assert math.isnan(max_abs_difference(torch.tensor([1.0, math.nan]), torch.tensor([1.0, 2.0])))
    assert math.isnan(max_abs_difference(np.array([1.0, 2.0]), np.array([math.nan, 2.0])))
    assert max_abs_difference(np.zeros(0), np.zeros(0)) == 0.0
    assert math.isnan(largest([0.1, math.nan, 0.2])) and largest([]) == 0.0
    assert not is_close(math.nan, 1.0)


def test_tensors_that_require_grad_are_compared_by_value_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert max_abs_difference(torch.ones(3, requires_grad=True) * 2, torch.ones(3)) == 1.0
