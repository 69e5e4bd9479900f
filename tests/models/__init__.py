"""Tests of olmoablate.models."""
