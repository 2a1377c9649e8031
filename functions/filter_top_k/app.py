"""Lambda function of the ``filter_top_k`` stage (the logic lives in ragstep.entry.aws.stage, in the shared layer)."""

from ragstep.entry.aws.stage import stage_handler

handler = stage_handler("filter_top_k")
