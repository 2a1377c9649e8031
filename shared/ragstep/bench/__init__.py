"""Benchmarks (``ragstep bench ...``): retrieval quality on BEIR sets, latency at scale, cold start, package size."""
