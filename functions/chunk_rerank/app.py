"""Lambda function of the ``chunk_rerank`` stage (the logic lives in ragstep.entry.aws.handlers, in the shared layer)."""

from ragstep.entry.aws.handlers import stage_handler

handler = stage_handler("chunk_rerank")
