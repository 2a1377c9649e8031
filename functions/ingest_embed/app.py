"""Lambda function of the ``ingest_embed`` stage (the logic lives in ragstep.handlers, in the shared layer)."""

from ragstep.handlers import stage_handler

handler = stage_handler("ingest_embed")
