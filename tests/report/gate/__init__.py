"""Tests of olmoablate.report.gate."""
