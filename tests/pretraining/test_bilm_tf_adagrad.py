"""`--optimizer adagrad` is bilm-tf's Adagrad: ``AdagradOptimizer(lr, initial_accumulator_value=1.0)`` on the
window-summed loss with global clipping, expressed on elmo-hf's mean loss (``run.bilm_tf_adagrad``)."""

from __future__ import annotations

import torch

from elmo_hf.pretraining import run
from elmo_hf.pretraining.run import bilm_tf_adagrad
from elmo_hf_cli import main

from .test_run import corpus, one_torch_thread, pretrain_args  # noqa: F401  (fixtures)

WINDOW, LEARNING_RATE, CLIP = 20, 0.2, 10.0


def bilm_tf_steps(start: torch.Tensor, mean_loss_gradients: list[torch.Tensor]) -> torch.Tensor:
    """bilm-tf's rule by hand: the gradient of ``total_loss * unroll_steps``, clipped to global norm 10, then
    ``accumulator += g**2; var -= lr * g / sqrt(accumulator)`` from an accumulator of 1.0 (TF 1's Adagrad)."""
    value, accumulator = start.clone(), torch.ones_like(start)
    for gradient in mean_loss_gradients:
        gradient = gradient * WINDOW
        gradient = gradient * min(1.0, CLIP / float(gradient.norm()))
        accumulator += gradient**2
        value -= LEARNING_RATE * gradient / accumulator.sqrt()
    return value


def test_the_accumulator_and_the_clip_on_the_mean_loss_give_bilm_tf_s_steps():
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(50, generator=generator, dtype=torch.float64)
    # Small gradients (clip inactive) and large ones (clipped), as early and noisy training gives both.
    gradients = [torch.randn(50, generator=generator, dtype=torch.float64) * scale for scale in (0.01, 0.05, 3.0, 0.2)]
    parameter = torch.nn.Parameter(start.clone())
    optimizer_class, arguments = bilm_tf_adagrad(LEARNING_RATE, WINDOW)
    optimizer = optimizer_class([parameter], **arguments)
    for gradient in gradients:
        parameter.grad = gradient.clone()
        torch.nn.utils.clip_grad_norm_([parameter], CLIP / WINDOW)
        optimizer.step()
    # Not bit-equal: torch's clip divides by (norm + 1e-6) and Adagrad adds eps 1e-10 to the root; TF adds neither.
    torch.testing.assert_close(parameter.detach(), bilm_tf_steps(start, gradients), rtol=1e-5, atol=1e-7)


def test_pretrain_with_adagrad_trains_with_bilm_tf_s_accumulator(corpus, tmp_path, monkeypatch):  # noqa: F811
    optimizers = []

    class RecordingTrainer(run.ELMoPreTrainingTrainer):
        def create_optimizer(self, *args, **kwargs):
            optimizers.append(super().create_optimizer(*args, **kwargs))
            return optimizers[-1]

    monkeypatch.setattr(run, "ELMoPreTrainingTrainer", RecordingTrainer)
    extra = ["--max-steps", 1, "--eval-steps", 0, "--optimizer", "adagrad"]
    assert main(pretrain_args(corpus, tmp_path / "run", *extra)) == 0
    (optimizer,) = optimizers
    assert isinstance(optimizer, torch.optim.Adagrad)
    group = optimizer.param_groups[0]
    # The scheduler has moved "lr" since (a linear decay over 1 step): the rate the run started with is "initial_lr".
    assert group["initial_lr"] == LEARNING_RATE and group["initial_accumulator_value"] == 1.0 / 10**2  # window 10 here
