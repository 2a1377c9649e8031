"""Lambda function of the ``chunk_rerank`` stage (the logic lives in ragstep.handlers, in the shared layer)."""

from ragstep.handlers import stage_handler

handler = stage_handler("chunk_rerank")
