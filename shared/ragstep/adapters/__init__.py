"""Implementations of the ports in :mod:`ragstep.ports` (model providers, stores, indexes)."""
