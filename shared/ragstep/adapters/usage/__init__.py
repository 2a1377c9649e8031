"""Usage records: :class:`ragstep.ports.UsageStore` in SQLite (embedded) or DynamoDB (AWS)."""
