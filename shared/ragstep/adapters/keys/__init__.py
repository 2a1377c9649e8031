"""Tenants and API keys: :class:`ragstep.ports.KeyStore` in SQLite (embedded) or DynamoDB (AWS)."""
