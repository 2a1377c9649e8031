"""Lambda function of the ``viking_merge`` stage (the logic lives in ragstep.entry.aws.stage, in the shared layer)."""

from ragstep.entry.aws.stage import stage_handler

handler = stage_handler("viking_merge")
