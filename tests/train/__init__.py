"""Tests of olmoablate.train."""
