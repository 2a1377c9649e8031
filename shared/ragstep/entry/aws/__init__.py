"""The AWS Lambda entry: ``runtime`` (what an execution environment keeps: clients, Powertools, the handler
wrapper), ``stage`` (the state machines' tasks), ``api`` (the HTTP API through Mangum) and ``events`` (the S3 upload
event that starts an ingest). Every module imports only the standard library until a handler is invoked."""
