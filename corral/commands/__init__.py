"""User-facing ``corral`` commands that talk to the API (the full SDK/CLI is its own issue)."""
