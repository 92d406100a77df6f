"""Corral's services. Each is its own process and never imports another service."""
