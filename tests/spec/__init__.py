"""Tests of olmoablate.spec."""
