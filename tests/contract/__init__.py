"""Tests of olmoablate.contract."""
