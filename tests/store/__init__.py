"""Tests of olmoablate.store."""
