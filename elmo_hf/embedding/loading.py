"""The model of a bulk-embedding run: the device it runs on (checked before anything is loaded), its placement and
compute dtype, and the words of its training vocabulary (``vocab.txt``) that can fill the token-layer cache up front.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..choices_elmo import COMPUTE_DTYPES
from ..int8_elmo import int8_unavailable_reason
from ..modeling_elmo import ELMoModel
from ..validation_elmo import check_choice


def checked_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device`` this torch can use; ``ValueError`` saying why not (a CPU-only build, no GPU)."""
    try:
        device = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device {device!r} is not a torch device name ({error}); e.g. cpu, cuda, cuda:1") from None
    if device.type == "cuda":
        if not torch.backends.cuda.is_built():
            raise ValueError(f"device {str(device)!r}: this torch ({torch.__version__}) is built without CUDA; install a CUDA build of torch")
        if not torch.cuda.is_available() or (device.index is not None and device.index >= torch.cuda.device_count()):
            raise ValueError(f"device {str(device)!r}: no such CUDA device is visible ({torch.cuda.device_count()} found)")
    return device


def placed_model(model: ELMoModel, device: str | torch.device | None, compute_dtype: str | None) -> ELMoModel:
    """``model`` in eval mode, moved to ``device`` and cast to ``compute_dtype`` (``COMPUTE_DTYPES``), both checked;
    ``None`` leaves it where and in the dtype it is. ``"int8"`` keeps float32 weights and turns the fast path's int8
    matmuls on (``ELMoModel.set_inference_path(int8=True)``; CPU only, refused elsewhere naming why); every other
    dtype turns them off. In place, as ``nn.Module.to`` is."""
    if compute_dtype is not None:
        check_choice("compute_dtype", compute_dtype, COMPUTE_DTYPES)
    model = model.eval() if device is None else model.to(checked_device(device)).eval()
    if compute_dtype is None:
        return model
    int8 = compute_dtype == "int8"
    unavailable = int8_unavailable_reason(model.device) if int8 else None
    if unavailable is not None:
        raise ValueError(f"compute_dtype 'int8' on device {str(model.device)!r}: {unavailable}")
    model = model.to(torch.float32 if int8 else getattr(torch, compute_dtype))
    encoder = model.encoder
    model.set_inference_path(model.inference_path, encoder.pre_pack_weights, encoder.skip_boundary_steps, int8=int8)
    return model


def model_compute_dtype(model: ELMoModel) -> str:
    """What ``model`` computes in, as ``COMPUTE_DTYPES`` names it: ``"int8"`` with the int8 matmuls on, else its
    weights' dtype."""
    return "int8" if model.encoder.int8_matmuls else str(model.dtype).removeprefix("torch.")


def emulated_compute_dtype(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether matmuls in ``dtype`` on ``device`` run without hardware support: bfloat16 on a CPU without AMX or
    AVX512-BF16, float16 on a CPU without AMX-FP16. torch emulates them there, far slower than float32
    (docs/design/embedding.md, "Compute dtypes")."""
    if device.type != "cpu":
        return False
    if dtype == torch.bfloat16:
        return not (torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())
    if dtype == torch.float16:
        return not torch.cpu._is_amx_fp16_supported()
    return False


def model_vocabulary_words(name_or_path: str | Path, revision: str | None = None, max_words: int | None = None) -> list[str]:
    """The first ``max_words`` words of a model's ``vocab.txt`` (a directory or Hub repo id): the word vocabulary it
    was trained with, most frequent first (pre-training outputs and converted NLPL archives have one); ``[]`` when it
    has none. Lines are stripped; empty lines and bilm-tf's ``!!!MAXTERMID`` line are skipped."""
    from transformers.utils import cached_file

    from ..corpus.vocabulary import VOCABULARY_FILE_NAME, vocabulary_file_words

    path = cached_file(
        str(name_or_path), VOCABULARY_FILE_NAME, revision=revision, _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
    words: list[str] = []
    if path is None:
        return words
    for _, word in vocabulary_file_words(path):
        if max_words is not None and len(words) >= max_words:
            break
        if word:
            words.append(word)
    return words


__all__ = ["checked_device", "emulated_compute_dtype", "model_compute_dtype", "model_vocabulary_words", "placed_model"]
