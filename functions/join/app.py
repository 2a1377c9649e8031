"""Lambda function of the join after a Parallel state (the logic is in ragstep.entry.aws.stage, in the shared layer)."""

from ragstep.entry.aws.stage import join_handler

handler = join_handler
