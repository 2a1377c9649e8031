"""What every embedder checks: the texts it is given and the vectors it hands back (row count, one dimension,
finite numbers), returned as float32 rows of unit length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ragstep.errors import InputError, ProviderError, RagstepError


def check_texts(texts: Sequence[str]) -> list[str]:
    # A bare string is a Sequence[str] too; embedding it character by character would be a silent disaster.
    if isinstance(texts, str):
        raise InputError("embed() takes a list of texts; use embed_query() for a single text")
    return list(texts)


def unit_rows(
    rows: Sequence[Any], *, expected_dim: int | None, source: str, error: type[RagstepError] = ProviderError
) -> np.ndarray:
    """Check vectors from ``source`` and return them as a float32 matrix with L2-normalised rows.

    Zero vectors stay zero (there is no direction to keep); cosine against them is 0, the honest score.
    """
    for i, row in enumerate(rows):
        if not isinstance(row, list | tuple | np.ndarray) or len(row) == 0:
            raise error(f"{source} returned an empty or malformed vector for input {i}")
    lengths = sorted({len(row) for row in rows})
    if len(lengths) > 1:
        raise error(f"{source} returned vectors of different dimensions ({', '.join(map(str, lengths[:5]))})")
    try:
        matrix = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise error(f"{source} returned vectors with non-numeric values") from exc
    if matrix.ndim != 2:
        raise error(f"{source} returned nested arrays instead of flat vectors")
    if expected_dim is not None and matrix.shape[1] != expected_dim:
        raise error(f"{source} returned {matrix.shape[1]}-dimensional vectors, expected {expected_dim}")
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        raise error(
            f"{source} returned non-finite values (NaN or infinity) in the vector for input {int(np.argmin(finite))}"
        )
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit.astype(np.float32)
