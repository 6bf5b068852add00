"""Notifications: channels and routing (`notify`), digests (`digest`)."""
