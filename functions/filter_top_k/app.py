"""Lambda function of the ``filter_top_k`` stage (the logic lives in ragstep.handlers, in the shared layer)."""

from ragstep.handlers import stage_handler

handler = stage_handler("filter_top_k")
