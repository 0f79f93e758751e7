"""Shared internals; nothing here is public API."""
