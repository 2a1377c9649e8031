"""Test helpers shared by several test modules (no tests here)."""
