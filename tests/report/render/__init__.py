"""Tests of olmoablate.report.render."""
