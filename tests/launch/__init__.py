"""Tests of olmoablate.launch."""
