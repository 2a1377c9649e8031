"""Pure algorithms of the web branch: blacklist rules and the compression of a session's web results."""
