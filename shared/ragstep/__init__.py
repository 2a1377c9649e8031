"""ragstep: retrieval-augmented generation as stateless stages over one JSON state.

The same stage functions run in-process on a laptop (embedded index, SQLite history, a folder as blob store)
and as Lambda functions chained by Step Functions on AWS.
"""

__version__ = "0.1.0"
