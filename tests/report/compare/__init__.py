"""Tests of olmoablate.report.compare."""
