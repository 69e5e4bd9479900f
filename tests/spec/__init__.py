"""Tests of olmoablate.plan."""
