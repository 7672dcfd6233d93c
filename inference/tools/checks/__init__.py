"""Checks of an engine's trustworthiness: numeric comparison against the framework, and the anti-caching audits."""
