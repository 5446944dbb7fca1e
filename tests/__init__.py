"""det_sdk's tests, filed by cost: unit/, integration/, e2e/ (tests/README.md)."""
