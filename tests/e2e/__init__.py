"""End-to-end tests across stages: the real CLI, launcher and training job together."""
