"""The few ONNX messages a model needs, written as protobuf bytes by hand.

ONNX Runtime reads a model from bytes; building those bytes with the ``onnx`` package would add ~40 MB (and its
protobuf bindings) to every install for a graph of a few hundred nodes. The wire format is small and stable: each
message below is the ONNX schema's field numbers (onnx/onnx.proto, IR version 8), nothing more.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

# TensorProto.DataType values.
FLOAT, UINT8, INT8, INT32, INT64 = 1, 2, 3, 6, 7
_DTYPES = {
    np.dtype(np.float32): FLOAT,
    np.dtype(np.uint8): UINT8,
    np.dtype(np.int8): INT8,
    np.dtype(np.int32): INT32,
    np.dtype(np.int64): INT64,
}


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 fields: two's complement on ten bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, value: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(value)) + value


def _str(field: int, value: str) -> bytes:
    return _bytes(field, value.encode("utf-8"))


def tensor(name: str, array: np.ndarray) -> bytes:
    """A TensorProto holding ``array`` (float32, uint8 or int64) as raw little-endian bytes."""
    data = np.ascontiguousarray(array)
    body = b"".join(_int(1, d) for d in data.shape)
    body += (
        _int(2, _DTYPES[data.dtype]) + _str(8, name) + _bytes(9, data.astype(data.dtype.newbyteorder("<")).tobytes())
    )
    return body


def attribute(name: str, value: int | float | Sequence[int]) -> bytes:
    """An AttributeProto: an int, a float or a list of ints."""
    if isinstance(value, bool | int):
        return _str(1, name) + _int(3, int(value)) + _int(20, 2)
    if isinstance(value, float):
        return _str(1, name) + _varint(2 << 3 | 5) + struct.pack("<f", value) + _int(20, 1)
    return _str(1, name) + b"".join(_int(8, v) for v in value) + _int(20, 7)


def node(
    op: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    *,
    domain: str = "",
    **attributes: int | float | Sequence[int],
) -> bytes:
    """A NodeProto: ``op`` (of ``domain``; "" is the standard one) from ``inputs`` to ``outputs``."""
    body = b"".join(_str(1, i) for i in inputs) + b"".join(_str(2, o) for o in outputs)
    body += _str(3, outputs[0]) + _str(4, op)
    body += b"".join(_bytes(5, attribute(k, v)) for k, v in attributes.items())
    if domain:
        body += _str(7, domain)
    return body


def value_info(name: str, elem_type: int, shape: Sequence[int | str]) -> bytes:
    """A ValueInfoProto for a graph input or output; a ``str`` dimension is symbolic (e.g. the batch)."""
    dims = b"".join(_bytes(1, _str(2, d) if isinstance(d, str) else _int(1, d)) for d in shape)
    tensor_type = _int(1, elem_type) + _bytes(2, dims)
    return _str(1, name) + _bytes(2, _bytes(1, tensor_type))


def model(
    name: str,
    nodes: Sequence[bytes],
    initializers: Sequence[bytes],
    inputs: Sequence[bytes],
    outputs: Sequence[bytes],
    opsets: dict[str, int],
) -> bytes:
    """A serialised ModelProto (IR version 8) of one graph."""
    graph = b"".join(_bytes(1, n) for n in nodes) + _str(2, name)
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += b"".join(_bytes(11, i) for i in inputs) + b"".join(_bytes(12, o) for o in outputs)
    opset_ids = b"".join(_bytes(8, (_str(1, d) if d else b"") + _int(2, v)) for d, v in opsets.items())
    return _int(1, 8) + _str(2, "ragstep") + opset_ids + _bytes(7, graph)
