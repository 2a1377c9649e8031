"""Lambda function of the ``chat_completion`` stage (the logic lives in ragstep.entry.aws.stage, shared layer)."""

from ragstep.entry.aws.stage import stage_handler

handler = stage_handler("chat_completion")
