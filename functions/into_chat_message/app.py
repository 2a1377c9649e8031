"""Lambda function of the ``into_chat_message`` stage (the logic lives in ragstep.entry.aws.stage, shared layer)."""

from ragstep.entry.aws.stage import stage_handler

handler = stage_handler("into_chat_message")
