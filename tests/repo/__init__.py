"""Checks of the repository around the package: import layering, the CI template, bench scripts."""
