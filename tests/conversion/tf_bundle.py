"""A TF checkpoint (tensor bundle, format V2) written by hand: a LevelDB table of BundleHeaderProto /
BundleEntryProto records and the data shards, so that tests can try layouts and damage the fixtures do not have.
Only float32 tensors, every key whole in one block."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from elmo_hf.conversion.tf_checkpoint import CRC32C_MASK_DELTA, TABLE_MAGIC_NUMBER, crc32c


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + CRC32C_MASK_DELTA) & 0xFFFFFFFF


def table_block(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A block (every key whole, one restart point) with its trailer: no compression, masked crc32c."""
    contents = b"".join(varint(0) + varint(len(key)) + varint(len(value)) + key + value for key, value in entries)
    contents += struct.pack("<II", 0, 1)
    return contents + b"\x00" + struct.pack("<I", masked_crc32c(contents + b"\x00"))


def length_delimited(field: int, payload: bytes) -> bytes:
    return bytes([field << 3 | 2]) + varint(len(payload)) + payload


def tensor_shape(shape: tuple[int, ...]) -> bytes:
    """TensorShapeProto: one ``dim`` (2) per axis with its ``size`` (1)."""
    return b"".join(length_delimited(2, b"\x08" + varint(size)) for size in shape)


def write_bundle(prefix: Path, num_shards: int, variables: dict[str, tuple[int, np.ndarray]]) -> None:
    """``variables``: name -> (shard, float32 array of any shape), each written after the shard's earlier ones."""
    entries = [(b"", b"\x08" + varint(num_shards))]  # the header: num_shards; endianness 0 (little) left out
    contents = {shard: b"" for shard in range(num_shards)}
    for name, (shard, value) in sorted(variables.items()):
        data = np.asarray(value, dtype="<f4").tobytes()
        entry = b"\x08\x01" + length_delimited(2, tensor_shape(np.shape(value))) + b"\x18" + varint(shard)
        entry += b"\x20" + varint(len(contents.get(shard, b""))) + b"\x28" + varint(len(data))
        entry += b"\x35" + struct.pack("<I", masked_crc32c(data))
        entries.append((name.encode(), entry))
        if shard in contents:
            contents[shard] += data
    data_block = table_block(entries)
    meta_block = table_block([])
    index_block = table_block([(entries[-1][0], varint(0) + varint(len(data_block) - 5))])
    handles = varint(len(data_block)) + varint(len(meta_block) - 5)
    handles += varint(len(data_block) + len(meta_block)) + varint(len(index_block) - 5)
    footer = handles.ljust(40, b"\x00") + struct.pack("<Q", TABLE_MAGIC_NUMBER)
    Path(f"{prefix}.index").write_bytes(data_block + meta_block + index_block + footer)
    for shard, data in contents.items():
        Path(f"{prefix}.data-{shard:05d}-of-{num_shards:05d}").write_bytes(data)
