"""Tests of olmoablate.plan.store."""
