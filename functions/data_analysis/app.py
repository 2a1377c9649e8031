"""Lambda function of the ``data_analysis`` stage (the logic lives in ragstep.entry.aws.stage, shared layer)."""

from ragstep.entry.aws.stage import stage_handler

handler = stage_handler("data_analysis")
