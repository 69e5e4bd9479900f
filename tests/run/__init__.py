"""Tests of olmoablate.run."""
