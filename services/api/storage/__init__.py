"""The storage slice: named mounts an admin defines and jobs use (``/api/v1/storage``)."""
