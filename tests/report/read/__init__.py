"""Tests of olmoablate.report.read."""
