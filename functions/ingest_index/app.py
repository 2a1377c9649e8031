"""Lambda function of the ``ingest_index`` stage (the logic lives in ragstep.handlers, in the shared layer)."""

from ragstep.handlers import stage_handler

handler = stage_handler("ingest_index")
