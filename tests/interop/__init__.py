"""Interop harness of issue 15: npm clients and agent CLIs against `orchestrator serve` (see harness.py)."""
