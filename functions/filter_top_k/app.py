"""Lambda function of the ``filter_top_k`` stage (the logic lives in ragstep.entry.aws.handlers, in the shared layer)."""

from ragstep.entry.aws.handlers import stage_handler

handler = stage_handler("filter_top_k")
