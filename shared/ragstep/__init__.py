"""ragstep: retrieval-augmented generation as stateless stages over one JSON state.

The same stage functions run in-process on a laptop (embedded index, SQLite history, a folder as blob store)
and as Lambda functions chained by Step Functions on AWS.
"""

import os

# One BLAS thread unless the user says otherwise. Our matrix-vector products are small and frequent: OpenBLAS's
# worker threads fall asleep between queries, and waking them cost a search more than the product itself (`ragstep
# bench latency` shows it). The local index parallelises large products itself (see adapters/local_index.py). Must
# run before numpy is first imported; setdefault keeps an explicit OPENBLAS_NUM_THREADS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
