"""Read a TensorFlow checkpoint (format V2: ``PREFIX.index``, ``PREFIX.data-SSSSS-of-NNNNN``) without TensorFlow or
protobuf: ``TFCheckpoint(prefix)`` parses the index (every block's checksum verified) and reads one variable at a time
as a NumPy array, its size and crc32c checked; ``checkpoint_prefix(path)`` accepts a training directory, a prefix or
one of its files. The format: docs/design/conversion.md.
"""

from __future__ import annotations

import codecs
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .shared import ConversionError

CHECKPOINT_STATE_FILE_NAME = "checkpoint"  # tf.train.Saver's "latest checkpoint" file in the training directory
INDEX_SUFFIX = ".index"
DATA_SUFFIX_PATTERN = re.compile(r"\.data-(\d{5})-of-(\d{5})$")
TABLE_MAGIC_NUMBER = 0xDB4775248B80FB57  # LevelDB's table magic, the last 8 bytes of the index file
TABLE_FOOTER_SIZE = 48  # two block handles padded to 40 bytes, then the magic
BLOCK_TRAILER_SIZE = 5  # compression type (1 byte) + masked crc32c (4 bytes)
NO_COMPRESSION = 0
HEADER_KEY = b""

# TF DataType enum value -> NumPy dtype (little-endian) of the types a bilm-tf checkpoint can hold.
NUMPY_DTYPE_OF_TF_DTYPE = {
    1: np.dtype("<f4"),  # DT_FLOAT
    2: np.dtype("<f8"),  # DT_DOUBLE
    3: np.dtype("<i4"),  # DT_INT32
    4: np.dtype("u1"),  # DT_UINT8
    5: np.dtype("<i2"),  # DT_INT16
    6: np.dtype("i1"),  # DT_INT8
    9: np.dtype("<i8"),  # DT_INT64
    10: np.dtype("?"),  # DT_BOOL
    19: np.dtype("<f2"),  # DT_HALF
}


# ---- crc32c (Castagnoli), as TF and LevelDB checksum blocks and tensors ----------------------------------------------

CRC32C_POLYNOMIAL = 0x82F63B78  # reflected
CRC32C_MASK_DELTA = 0xA282EAD8


def _crc32c_byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(CRC32C_POLYNOMIAL), table >> 1).astype(np.uint32)
    return table


CRC32C_TABLE = _crc32c_byte_table()
_CRC32C_TABLE_LIST = [int(value) for value in CRC32C_TABLE]
_BIT_VALUES = np.uint32(1) << np.arange(32, dtype=np.uint32)


def _apply_operator(columns: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Apply a linear map of 32-bit CRC states (``columns[b]`` = image of bit b) to every state of ``states``."""
    result = np.zeros_like(states)
    for bit in range(32):
        result ^= np.where((states >> np.uint32(bit)) & np.uint32(1), columns[bit], np.uint32(0))
    return result


def _zero_bytes_operator(count: int) -> np.ndarray:
    """The map taking a raw CRC state to its state after ``count`` zero bytes (square-and-multiply)."""
    one_byte = CRC32C_TABLE[_BIT_VALUES & np.uint32(0xFF)] ^ (_BIT_VALUES >> np.uint32(8))
    result, power = _BIT_VALUES.copy(), one_byte
    while count:
        if count & 1:
            result = _apply_operator(power, result)
        power = _apply_operator(power, power)
        count >>= 1
    return result


def _four_zero_bytes(states: np.ndarray) -> np.ndarray:
    for _ in range(4):
        states = CRC32C_TABLE[states & np.uint32(0xFF)] ^ (states >> np.uint32(8))
    return states


# The state after 4 bytes is linear in (state ^ the 4 bytes as a little-endian word): its low and high halves are
# looked up in two 65536-entry tables (256 KB each), 4 bytes per step instead of 1.
_LOW_HALF_TABLE = _four_zero_bytes(np.arange(1 << 16, dtype=np.uint32))
_HIGH_HALF_TABLE = _four_zero_bytes(np.arange(1 << 16, dtype=np.uint32) << np.uint32(16))


def _raw_crc32c(data: np.ndarray) -> int:
    """CRC state after ``data`` (uint8) from state 0, without the final inversion. Large inputs are cut into 2**k
    equal lanes updated together, 4 bytes per step, then joined pairwise (the CRC is linear: crc(A + B) =
    shift(crc(A), len(B)) ^ crc(B) from state 0), so a gigabyte takes seconds, not an hour."""
    size = int(data.size)
    if size < 4096:
        state = 0
        for byte in data.tobytes():
            state = _CRC32C_TABLE_LIST[(state ^ byte) & 0xFF] ^ (state >> 8)
        return state
    lanes = 1 << min(14, (size // 1024).bit_length() - 1)
    lane_length = size // lanes // 4 * 4
    words = np.ascontiguousarray(data[: lanes * lane_length]).view("<u4").reshape(lanes, lane_length // 4)
    states = np.zeros(lanes, dtype=np.uint32)
    for start in range(0, words.shape[1], 256):
        for column in np.ascontiguousarray(words[:, start : start + 256].T):
            mixed = states ^ column
            states = _LOW_HALF_TABLE[mixed & np.uint32(0xFFFF)] ^ _HIGH_HALF_TABLE[mixed >> np.uint32(16)]
    shift = _zero_bytes_operator(lane_length)
    while states.size > 1:
        states = _apply_operator(shift, states[0::2]) ^ states[1::2]
        shift = _apply_operator(shift, shift)
    tail = data[lanes * lane_length :]
    return int(_apply_operator(_zero_bytes_operator(int(tail.size)), states)[0]) ^ _raw_crc32c(tail)


def crc32c(data: bytes | np.ndarray) -> int:
    """The CRC-32C (Castagnoli) of ``data`` (bytes or a uint8 array): ``crc32c(b"123456789") == 0xE3069283``."""
    array = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data.reshape(-1)
    # crc = ~raw(data, from ~0) and raw(data, from s) = raw(data, from 0) ^ shift(s, len(data)).
    initial = int(_apply_operator(_zero_bytes_operator(int(array.size)), np.array([0xFFFFFFFF], dtype=np.uint32))[0])
    return (_raw_crc32c(array) ^ initial) ^ 0xFFFFFFFF


def unmask_crc32c(masked: int) -> int:
    """LevelDB / TF store ``((crc >> 15) | (crc << 17)) + 0xa282ead8`` so that a CRC of data holding CRCs stays
    informative; this undoes it."""
    rotated = (masked - CRC32C_MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


# ---- protobuf wire format --------------------------------------------------------------------------------------------


def read_varint(buffer: bytes, position: int) -> tuple[int, int]:
    """(value, next position) of the base-128 varint at ``position``."""
    value, shift = 0, 0
    while True:
        if position >= len(buffer) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def protobuf_fields(message: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of every field of a serialized message: ints for varint and fixed-size fields, bytes
    for length-delimited ones (sub-messages, strings, packed repeats)."""
    position = 0
    while position < len(message):
        key, position = read_varint(message, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = read_varint(message, position)
        elif wire_type == 1:
            value, position = struct.unpack_from("<Q", message, position)[0], position + 8
        elif wire_type == 2:
            length, position = read_varint(message, position)
            value, position = message[position : position + length], position + length
            if len(value) != length:
                raise ValueError("truncated length-delimited field")
        elif wire_type == 5:
            value, position = struct.unpack_from("<I", message, position)[0], position + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
        yield number, value


@dataclass(frozen=True)
class TensorEntry:
    """One variable's ``BundleEntryProto``: where its bytes are and what they hold."""

    dtype_code: int  # TF's DataType enum
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: int | None  # unmasked; None when the entry has none
    num_slices: int

    @property
    def dtype(self) -> np.dtype | None:
        return NUMPY_DTYPE_OF_TF_DTYPE.get(self.dtype_code)


def parse_tensor_shape(message: bytes) -> tuple[int, ...]:
    """``TensorShapeProto``: repeated ``dim`` (2) with ``size`` (1); ``unknown_rank`` (3) is refused."""
    dims = []
    for number, value in protobuf_fields(message):
        if number == 2:
            dims.append(next((size for field, size in protobuf_fields(value) if field == 1), 0))
        elif number == 3 and value:
            raise ValueError("a tensor of unknown rank")
    return tuple(dims)


def parse_bundle_entry(message: bytes) -> TensorEntry:
    """``BundleEntryProto``: dtype 1, shape 2, shard_id 3, offset 4, size 5, crc32c 6 (fixed32, masked), slices 7."""
    scalars, shape, num_slices = {1: 0, 3: 0, 4: 0, 5: 0, 6: None}, (), 0
    for number, value in protobuf_fields(message):
        if number == 2:
            shape = parse_tensor_shape(value)
        elif number == 7:
            num_slices += 1
        elif number in scalars:
            scalars[number] = value
    checksum = None if scalars[6] is None else unmask_crc32c(scalars[6])
    return TensorEntry(scalars[1], shape, scalars[3], scalars[4], scalars[5], checksum, num_slices)


# ---- the SSTable of the .index file ----------------------------------------------------------------------------------


def read_block(table: bytes, handle: bytes, index_file: Path) -> bytes:
    """The contents of the block at ``handle`` (offset and size varints), its trailer's checksum verified."""
    offset, position = read_varint(handle, 0)
    size, _ = read_varint(handle, position)
    end = offset + size + BLOCK_TRAILER_SIZE
    if end > len(table):
        raise ConversionError(f"{index_file} is truncated: a block ends at byte {end:,} of {len(table):,}.")
    contents, compression = table[offset : offset + size], table[offset + size]
    if compression != NO_COMPRESSION:
        raise ConversionError(f"{index_file}: compressed index blocks (type {compression}) are not supported; TF writes none.")
    (masked,) = struct.unpack_from("<I", table, offset + size + 1)
    if crc32c(contents + bytes([compression])) != unmask_crc32c(masked):
        raise ConversionError(f"{index_file} is damaged: the checksum of the block at byte {offset:,} does not match.")
    return contents


def block_entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every entry of a table block: each key shares a prefix with the one before it."""
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    entries_end = len(block) - 4 - 4 * num_restarts
    position, key = 0, b""
    while position < entries_end:
        shared, position = read_varint(block, position)
        unshared, position = read_varint(block, position)
        value_length, position = read_varint(block, position)
        key = key[:shared] + block[position : position + unshared]
        position += unshared
        yield key, block[position : position + value_length]
        position += value_length


def read_table(index_file: Path) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of an SSTable file, in key order."""
    table = index_file.read_bytes()
    if len(table) < TABLE_FOOTER_SIZE or struct.unpack_from("<Q", table, len(table) - 8)[0] != TABLE_MAGIC_NUMBER:
        raise ConversionError(
            f"{index_file} is not a TensorFlow checkpoint index (no table footer): expected the .index file of a "
            "checkpoint written by tf.train.Saver (format V2)."
        )
    footer = table[-TABLE_FOOTER_SIZE:]
    _, position = read_varint(footer, 0)  # the metaindex block handle (offset, size): unused
    _, position = read_varint(footer, position)
    index_block = read_block(table, footer[position:], index_file)
    for _, data_block_handle in block_entries(index_block):
        yield from block_entries(read_block(table, data_block_handle, index_file))


# ---- the checkpoint --------------------------------------------------------------------------------------------------


def _prefix_from_state_file(directory: Path) -> Path:
    """The latest checkpoint named by ``directory/checkpoint`` (``model_checkpoint_path: "..."``)."""
    state_file = directory / CHECKPOINT_STATE_FILE_NAME
    expected = 'expected tf.train.Saver\'s checkpoint file, a text protobuf with a line model_checkpoint_path: "..."'
    try:
        content = state_file.read_bytes()
    except OSError as error:
        raise ConversionError(f"{state_file} cannot be read ({error}); {expected}.") from None
    match = re.search(rb'^model_checkpoint_path:\s*"(.*)"\s*$', content, re.MULTILINE)
    if match is None:
        raise ConversionError(f"{state_file} names no model_checkpoint_path ({expected}).")
    try:
        # Text-format protobuf escapes a string's bytes C-style (\", \\, \n, octal \303\251 for UTF-8 "é"):
        # unescape to bytes, then decode them as the UTF-8 path they are (undecodable bytes kept as surrogates).
        recorded = Path(codecs.escape_decode(match.group(1))[0].decode("utf-8", "surrogateescape"))
    except (ValueError, UnicodeError) as error:
        raise ConversionError(
            f"{state_file}: the model_checkpoint_path value {match.group(1)!r} cannot be unescaped ({error}); {expected}."
        ) from None
    candidate = recorded if recorded.is_absolute() else directory / recorded
    # Saver records an absolute path by default: that of the training machine. A copied directory holds the files
    # under the same name.
    if not Path(f"{candidate}{INDEX_SUFFIX}").is_file():
        candidate = directory / recorded.name
    return candidate


def checkpoint_prefix(path: str | Path) -> Path:
    """The checkpoint prefix (``.../model.ckpt-N``) of a training directory (its latest checkpoint), a prefix, or one
    of the checkpoint's files (``.index``, ``.data-*``, ``.meta``). Raises ``ConversionError`` naming what is
    missing."""
    path = Path(path)
    if path.is_dir():
        if not (path / CHECKPOINT_STATE_FILE_NAME).is_file():
            raise ConversionError(
                f"{path} is a directory without a '{CHECKPOINT_STATE_FILE_NAME}' file: expected bilm-tf's --save_dir "
                "(tf.train.Saver's checkpoint file naming model.ckpt-N), or give the prefix .../model.ckpt-N."
            )
        prefix = _prefix_from_state_file(path)
    else:
        prefix = Path(DATA_SUFFIX_PATTERN.sub("", re.sub(r"\.(index|meta)$", "", str(path))))
    index_file = Path(f"{prefix}{INDEX_SUFFIX}")
    if not index_file.is_file():
        single_file = " (a single file: the format V1 of TF < 1.0, not supported)" if prefix.is_file() else ""
        raise ConversionError(
            f"TensorFlow checkpoint not found: {index_file} does not exist{single_file}; expected a checkpoint "
            "prefix such as DIR/model.ckpt-N with its .index and .data-00000-of-0000N files, or bilm-tf's save directory."
        )
    return prefix


class TFCheckpoint:
    """The variables of a TF checkpoint (format V2), read without TensorFlow.

    Args:
        path: a checkpoint prefix, one of its files, or a training directory (see ``checkpoint_prefix``).

    ``entries`` maps every variable name to its ``TensorEntry``; ``read(name)`` returns its value.
    """

    def __init__(self, path: str | Path):
        self.prefix = checkpoint_prefix(path)
        self.index_file = Path(f"{self.prefix}{INDEX_SUFFIX}")
        self.num_shards = 1
        self.entries: dict[str, TensorEntry] = {}
        try:
            for key, value in read_table(self.index_file):
                if key == HEADER_KEY:
                    self._read_header(value)
                else:
                    self.entries[key.decode("utf-8")] = parse_bundle_entry(value)
        except (ValueError, struct.error, UnicodeDecodeError) as error:
            if isinstance(error, ConversionError):
                raise
            raise ConversionError(f"{self.index_file} cannot be parsed (damaged?): {error}") from None
        self._check_shard_numbers()
        self._check_data_files()

    def _check_shard_numbers(self) -> None:
        """Every entry's shard is one of the header's ``num_shards`` (a damaged index would name a file that is not
        part of the checkpoint)."""
        for name, entry in self.entries.items():
            if not 0 <= entry.shard < self.num_shards:
                raise ConversionError(
                    f"{self.index_file} is damaged: variable {name!r} is placed in shard {entry.shard}, but the "
                    f"checkpoint has {self.num_shards} shard(s) (expected a shard number below {self.num_shards})."
                )

    def _check_data_files(self) -> None:
        """Every shard exists and holds every byte the index places in it (a truncated download is named at once)."""
        for shard in range(self.num_shards):
            data_file = self.data_file(shard)
            end = max((entry.offset + entry.size for entry in self.entries.values() if entry.shard == shard), default=0)
            if not data_file.is_file():
                raise ConversionError(f"{data_file} is missing (shard {shard} of checkpoint {self.prefix}).")
            if data_file.stat().st_size < end:
                raise ConversionError(
                    f"{data_file} is truncated: the checkpoint's index places {end:,} bytes in it, the file has "
                    f"{data_file.stat().st_size:,}."
                )

    def _read_header(self, message: bytes) -> None:
        """``BundleHeaderProto``: num_shards 1, endianness 2 (0 little, 1 big)."""
        for number, value in protobuf_fields(message):
            if number == 1:
                self.num_shards = value
            elif number == 2 and value != 0:
                raise ConversionError(f"{self.index_file}: a big-endian checkpoint; only little-endian ones are supported.")

    def data_file(self, shard: int) -> Path:
        """``PREFIX.data-SSSSS-of-NNNNN``: shard ``shard`` (from 0) of ``num_shards``, both on five digits."""
        return Path(f"{self.prefix}.data-{shard:05d}-of-{self.num_shards:05d}")

    def read(self, name: str) -> np.ndarray:
        """The value of variable ``name``, its byte count and crc32c checked. Raises ``ConversionError``."""
        entry = self.entries.get(name)
        if entry is None:
            raise ConversionError(f"{self.index_file}: no variable {name!r}.")
        if entry.num_slices or entry.dtype is None:
            what = "is partitioned into slices" if entry.num_slices else f"has TF dtype {entry.dtype_code} (not numeric)"
            raise ConversionError(f"{self.index_file}: variable {name!r} {what}; this reader supports whole numeric tensors.")
        expected_size = int(np.prod(entry.shape, dtype=np.int64)) * entry.dtype.itemsize
        data_file = self.data_file(entry.shard)
        if entry.size != expected_size:
            raise ConversionError(
                f"{self.index_file}: variable {name!r} of shape {entry.shape} holds {entry.size:,} bytes, expected {expected_size:,}."
            )
        raw = np.fromfile(data_file, dtype=np.uint8, count=entry.size, offset=entry.offset)
        if entry.crc32c is not None and crc32c(raw) != entry.crc32c:
            raise ConversionError(f"{data_file} is damaged: the checksum of variable {name!r} does not match.")
        return raw.view(entry.dtype).reshape(entry.shape)


__all__ = ["TFCheckpoint", "TensorEntry", "checkpoint_prefix", "crc32c", "read_table", "unmask_crc32c"]
