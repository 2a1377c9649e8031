"""Lambda function of the ``extract_entities`` stage (the logic is in ragstep.entry.aws.stage, in the shared layer)."""

from ragstep.entry.aws.stage import stage_handler

handler = stage_handler("extract_entities")
