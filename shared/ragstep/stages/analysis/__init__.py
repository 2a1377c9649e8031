"""Stages over the data behind the results: ``data_analysis`` (SQL over ingested spreadsheets)."""
