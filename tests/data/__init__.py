"""Tests of olmoablate.data."""
