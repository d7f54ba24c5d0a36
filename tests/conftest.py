"""Shared test set-up: makes ``tests/`` importable so suites can share ``strategies``."""
