"""``ragstep bench latency --vectors``: the default random vectors are the stream the benchmark always drew, and
``minilm`` and ``e5`` give each chunk its passage's own embedding moved by noise (so a chunk's nearest passage is its
own)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from ragstep.bench.latency import corpus_batches, unit_vectors


def test_random_vectors_are_the_stream_drawn_before_the_option(bench_dir: Path) -> None:
    rng = np.random.default_rng(0)
    expected = np.concatenate([unit_vectors(rng, 40), unit_vectors(rng, 40), unit_vectors(rng, 20)])
    got = np.concatenate([v for _, v in corpus_batches(bench_dir, 100, 40)])
    assert np.array_equal(got, expected)


@pytest.mark.parametrize(("kind", "stem"), [("minilm", "emb"), ("e5", "e5")])
def test_embedding_vectors_are_each_passages_embedding_with_noise(bench_dir: Path, kind: str, stem: str) -> None:
    base = np.load(bench_dir / "msmarco-5k" / f"corpus.{stem}.npy").astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    vectors = np.concatenate([v for _, v in corpus_batches(bench_dir, 5100, 1000, vectors=kind)])
    assert vectors.shape == (5100, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    nearest = np.argmax(vectors @ base.T, axis=1)
    # (a few passages have a near-identical twin in the set, which the noise can make nearer)
    assert np.mean(nearest == np.arange(5100) % 5000) >= 0.99  # copy 2 of passages 0..99 too
    assert float(np.min(np.sum(vectors * base[np.arange(5100) % 5000], axis=1))) < 0.999  # moved, not equal


def test_the_latency_report_names_its_vectors(bench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "latency", "--docs", "300", "--queries", "3", "--peers", "none", "--bench-dir", str(bench_dir)]
    code, out, err = run_cli(capsys, *args, "--vectors", "minilm", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["vectors"] == "minilm" and report["search_p50_ms"] > 0
    with pytest.raises(SystemExit) as exit_info:  # an argparse error: exit status 2
        run_cli(capsys, *args, "--vectors", "glove")
    assert exit_info.value.code == 2
    assert "--vectors: invalid choice: 'glove'" in capsys.readouterr().err
