"""Runnable examples of the SDK; tests import their apps from here."""
