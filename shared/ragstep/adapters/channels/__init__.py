"""Chat platforms the bot answers on (:class:`ragstep.ports.MessageChannel`): Slack's Web API."""
