"""The doctests skip the deprecated alias module: importing it warns, by design (tests/test_public_api.py)."""

collect_ignore = ["fusionopt/sweep.py"]
