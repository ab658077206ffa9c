"""What ``ELMoModel.forward`` accepts: each check raises ``ValueError`` naming the input, what was expected and what
was given (character ids, the attention mask, bilm-tf's backward stream, a carried LSTM state).
"""

from __future__ import annotations

import torch

from .configuration_elmo import ELMoConfig


def validated_word_mask(config: ELMoConfig, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.BoolTensor:
    """The word mask (batch, words) of ``input_ids`` (batch, words, ``config.token_row_width``): True at words. Checks
    the ids' type, shape, dtype and range, that ``attention_mask`` (when given) agrees with them, and right padding."""
    num_slots = config.token_row_width
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.LongTensor of shape (batch, words, {num_slots}), got {type(input_ids).__name__}.")
    if input_ids.dim() != 3 or input_ids.shape[-1] != num_slots:
        own_tokenizer = (
            "" if config.character_vocabulary == "utf8_bytes" else "; this model needs its own tokenizer "
            "(AutoTokenizer.from_pretrained of its directory), which has its character vocabulary"
        )
        raise ValueError(
            f"input_ids must have shape (batch, words, {num_slots}) (character ids from ELMoTokenizer{own_tokenizer}), "
            f"got shape {tuple(input_ids.shape)}."
        )
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool or input_ids.is_complex():
        raise ValueError(f"input_ids must hold integer character ids, got dtype {input_ids.dtype}.")
    largest_id = config.largest_input_id
    if torch.iinfo(input_ids.dtype).max < largest_id:
        raise ValueError(
            f"input_ids must be int16, int32 or int64: {input_ids.dtype} cannot hold the character ids up to "
            f"{largest_id} (ELMoTokenizer returns int64)."
        )
    check_id_ranges(config, input_ids)
    is_word = (input_ids != 0).any(dim=-1)  # (B, T)
    if attention_mask is None:
        word_mask = is_word
    else:
        if attention_mask.shape != input_ids.shape[:2]:
            raise ValueError(
                f"attention_mask must have shape (batch, words) = {tuple(input_ids.shape[:2])}, "
                f"got {tuple(attention_mask.shape)}."
            )
        word_mask = attention_mask.bool()
        if not torch.equal(word_mask, is_word):
            batch_index, word_index = (word_mask != is_word).nonzero()[0].tolist()
            raise ValueError(
                f"attention_mask and input_ids disagree at (batch {batch_index}, word {word_index}): the mask says "
                f"{'word' if word_mask[batch_index, word_index] else 'padding'} but the character ids are "
                f"{'all 0 (padding)' if not is_word[batch_index, word_index] else 'a word'}."
            )
    word_after_padding = word_mask[:, 1:] & ~word_mask[:, :-1]  # (B, T - 1)
    if word_after_padding.any():
        batch_index = int(word_after_padding.any(dim=1).nonzero()[0])
        raise ValueError(
            f"Sentence {batch_index} has padding before a word: ELMo needs right-padded input "
            "(padding_side='right'), words first."
        )
    return word_mask


def check_id_ranges(config: ELMoConfig, input_ids: torch.Tensor) -> None:
    """Character ids in [0, num_characters); with a word embedding, the word id in front of each row in
    [0, word_embedding_vocab_size)."""
    if not input_ids.numel():
        return
    word_slots = config.num_word_id_slots
    characters = input_ids[..., word_slots:]
    if characters.min() < 0 or characters.max() >= config.num_characters:
        raise ValueError(
            f"input_ids must be character ids in [0, {config.num_characters}), got values in "
            f"[{int(characters.min())}, {int(characters.max())}]."
        )
    if word_slots:
        word_ids = input_ids[..., 0]
        if word_ids.min() < 0 or word_ids.max() >= config.word_embedding_vocab_size:
            raise ValueError(
                f"input_ids[..., 0] must be word ids in [0, {config.word_embedding_vocab_size}), got values in "
                f"[{int(word_ids.min())}, {int(word_ids.max())}]."
            )


def check_backward_stream(
    config: ELMoConfig, backward_input_ids: torch.Tensor, input_ids: torch.Tensor, word_mask: torch.BoolTensor
) -> None:
    """``backward_input_ids`` (bilm-tf's reversed stream): the shape of ``input_ids`` and real tokens exactly where
    ``word_mask`` (batch, words) has them."""
    if not isinstance(backward_input_ids, torch.Tensor) or backward_input_ids.shape != input_ids.shape:
        found = tuple(backward_input_ids.shape) if isinstance(backward_input_ids, torch.Tensor) else type(backward_input_ids).__name__
        raise ValueError(f"backward_input_ids must have the shape of input_ids {tuple(input_ids.shape)}, got {found}.")
    backward_mask = validated_word_mask(config, backward_input_ids, None)
    if not torch.equal(backward_mask, word_mask):
        raise ValueError(
            "backward_input_ids must have real tokens exactly where input_ids has them (the two streams of a "
            "window share attention_mask)."
        )


def validated_lstm_state(config: ELMoConfig, lstm_state: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """``lstm_state`` as ``ELMoModelOutput.lstm_state`` returns it: (hidden (L, 2, S, P), cell (L, 2, S, D)), one S."""
    if not isinstance(lstm_state, (tuple, list)) or len(lstm_state) != 2:
        raise ValueError("lstm_state must be a (hidden, cell) pair as returned in ELMoModelOutput.lstm_state.")
    hidden, cell = lstm_state
    expected = ((config.num_lstm_layers, 2, config.projection_dim), (config.num_lstm_layers, 2, config.lstm_cell_size))
    for name, tensor, (layers, directions, size) in zip(("hidden", "cell"), (hidden, cell), expected):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 4 or tensor.shape[:2] != (layers, directions) or tensor.shape[3] != size:
            found = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"lstm_state {name} must have shape ({layers}, {directions}, batch, {size}), got {found}.")
    if hidden.shape[2] != cell.shape[2]:
        raise ValueError(f"lstm_state hidden and cell disagree on the batch size: {hidden.shape[2]} vs {cell.shape[2]}.")
    return hidden, cell


__all__ = ["check_backward_stream", "check_id_ranges", "validated_lstm_state", "validated_word_mask"]
