"""The data-analysis sandbox (:class:`~ragstep.ports.DataAnalysis`): DuckDB in memory, checked SQL, locked down."""
