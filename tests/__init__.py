"""The test suite; its layout mirrors the olmoablate package (tests/README.md)."""
