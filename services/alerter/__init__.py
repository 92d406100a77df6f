"""The alerter: turns events into alerts with a lifecycle (routing and paging follow)."""
