"""Tests of olmoablate.testing (the test support itself)."""
