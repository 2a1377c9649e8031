"""Lambda function of the ``ingest_embed_batch`` stage (the logic lives in ragstep.entry.aws.stage, shared layer)."""

from ragstep.entry.aws.stage import stage_handler

handler = stage_handler("ingest_embed_batch")
