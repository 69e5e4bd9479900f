"""Tests of olmoablate.report."""
